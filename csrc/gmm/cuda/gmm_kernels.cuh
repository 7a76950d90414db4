// CUDA kernels of GMM cross-attention: one warp per query row (forward, row-side backward) or per key (key-side
// backward). Lanes split the head dimensions; keys (or rows) are visited one after another, every dot product is a warp
// reduction, so every lane holds the same softmax state and mixture value. The arithmetic is gmm_math.h's, shared with
// the CPU kernels.
//
// Device source: launched by gmm_launch.cuh, compiled by nvcc (gmm_cuda.cu) and under the HIP CPU emulator
// (tests/cpp/emulated).
#pragma once

#include "common/cuda_compat.h"  // first: under the emulator torch's headers must precede HIP's

#include "common/head_rows.h"
#include "common/key_lengths.h"
#include "common/online_softmax.h"
#include "common/warp.cuh"
#include "gmm/cuda/mixture_values.cuh"
#include "gmm/gmm_math.h"

namespace mma_nmt::gmm::cuda {

constexpr int kWarp = gpu::kWarpSize;
constexpr int kMaxPerLane = 8;  // head_dim and value_dim up to 256
using gpu::kMaxWarpsPerBlock;  // rows (or keys) per block at most (gpu::Launch::warps_per_block)
using gpu::warp_index;  // the row (or key) of this warp
using gpu::warp_max;
using gpu::warp_sum;
// A lane's slice (elements lane, lane + 32, ...) of a row, in acc_t[kMaxPerLane] registers; the dot product of one with
// a row in memory.
using gpu::load_slice;
using gpu::warp_dot;

// Views and sizes every kernel needs. q, k, v and dout (backward only) are read through their strides (head views of
// projections, common/head_rows.h); the per-row inputs are contiguous, at the start of the tensor, in q's dtype or in
// acc_t (mixture_values.cuh).
template <typename scalar_t, typename acc_t>
struct GmmArgs {
  gpu::HeadRows<const scalar_t> q, k, v, dout;  // (B, H, T, D), (B, H, S, D), (B, H, S, Dv), (B, H, T, Dv)
  MixtureIn<scalar_t, acc_t> omega, mu, sigma, gate, center, width;
  const int64_t* lengths;
  int64_t batch, heads, query_len, key_len, head_dim, value_dim, components, normalization;
  acc_t scale, floor;
};

// The real keys of query row `row` (of B*H*T)'s sentence.
template <typename scalar_t, typename acc_t>
__device__ int64_t keys_of(const GmmArgs<scalar_t, acc_t>& a, int64_t row) {
  return keys_of_sentence(a.lengths, row / (a.heads * a.query_len), a.key_len);
}

// Per-row mixture state: components read from global memory on use (K is small), plus the strict-mode shift.
template <typename scalar_t, typename acc_t>
struct RowMixture {
  MixtureIn<scalar_t, acc_t> omega, mu, sigma;  // from the row's first component
  int64_t K, normalization;
  acc_t floor, shift;

  __device__ Component<acc_t> component(int64_t k) const {
    Component<acc_t> c = make_component<acc_t>(omega[k], mu[k], sigma[k], floor, normalization);
    c.log_coeff -= shift;
    return c;
  }
  __device__ acc_t u(acc_t position) const {
    acc_t total = 0;
    for (int64_t k = 0; k < K; ++k) {
      const Component<acc_t> c = component(k);
      total += c.omega * component_term(c, position);
    }
    return total;
  }
};

template <typename scalar_t, typename acc_t>
__device__ RowMixture<scalar_t, acc_t> row_mixture(const GmmArgs<scalar_t, acc_t>& a, int64_t row, int64_t n_keys) {
  const int64_t first = row * a.components;
  RowMixture<scalar_t, acc_t> m{a.omega.at(first), a.mu.at(first), a.sigma.at(first), a.components, a.normalization,
                                a.floor, acc_t(0)};
  if (a.normalization == kStrict && n_keys > 0) {
    // strict_shift over the row's components, read one at a time (no per-row array on the device).
    acc_t best = negative_infinity<acc_t>();
    for (int64_t k = 0; k < m.K; ++k) {
      Component<acc_t> c = m.component(k);
      best = fmax(best, strict_shift(&c, 1, n_keys));
    }
    m.shift = best == negative_infinity<acc_t>() ? acc_t(0) : best;
  }
  return m;
}

template <typename scalar_t, typename acc_t>
__device__ acc_t logit_bias(const GmmArgs<scalar_t, acc_t>& a, int64_t row, acc_t position) {
  if (!a.center.present()) return acc_t(0);
  const LocalBiasRow<acc_t> r = make_local_bias<acc_t>(a.center[row], a.width[row], a.floor);
  return local_bias(r, position);
}

// Outputs of the forward kernel (stats in acc_t), and the backward kernels' saved statistics.
template <typename scalar_t, typename acc_t>
struct GmmOutputs {
  gpu::HeadRows<scalar_t> out;  // (B, H, T, Dv), position-major as allocated (gmm_outputs.h)
  scalar_t *alpha, *beta;
  acc_t *lse, *log_mass, *ctx_a, *ctx_b;
};

template <typename scalar_t, typename acc_t>
__device__ void write_row_weights(const GmmArgs<scalar_t, acc_t>& a, GmmOutputs<scalar_t, acc_t> o, int64_t row,
                                  int64_t n_keys, const acc_t (&q)[kMaxPerLane],
                                  const RowMixture<scalar_t, acc_t>& mix, acc_t lse, acc_t beta_scale, int lane) {
  const scalar_t* keys = a.k.row_of(row / a.query_len, a.heads, 0);  // rows a.k.row_stride apart
  for (int64_t j = 0; j < n_keys; ++j) {
    const acc_t logit = warp_dot(q, keys + j * a.k.row_stride, a.head_dim) * a.scale + logit_bias(a, row, acc_t(j));
    if (lane == 0) {
      o.alpha[row * a.key_len + j] = static_cast<scalar_t>(exp_of(logit - lse));
      o.beta[row * a.key_len + j] = static_cast<scalar_t>(mix.u(acc_t(j)) * beta_scale);
    }
  }
}

template <typename scalar_t, typename acc_t>
__global__ void gmm_forward_kernel(GmmArgs<scalar_t, acc_t> a, GmmOutputs<scalar_t, acc_t> o) {
  const int lane = threadIdx.x % kWarp;
  const int64_t row = warp_index();
  if (row >= a.batch * a.heads * a.query_len) return;
  const int64_t bh = row / a.query_len, i = row % a.query_len, n_keys = keys_of(a, row), Dv = a.value_dim;
  acc_t q[kMaxPerLane], acc_a[kMaxPerLane] = {}, acc_b[kMaxPerLane] = {};
  const scalar_t* keys = a.k.row_of(bh, a.heads, 0);  // rows a.k.row_stride apart, as the values'
  const scalar_t* values = a.v.row_of(bh, a.heads, 0);
  load_slice(a.q.row_of(bh, a.heads, i), a.head_dim, q);
  const RowMixture<scalar_t, acc_t> mix = row_mixture(a, row, n_keys);
  OnlineSoftmax<acc_t> state;
  acc_t mass = 0;
  for (int64_t j = 0; j < n_keys; ++j) {
    const acc_t logit = warp_dot(q, keys + j * a.k.row_stride, a.head_dim) * a.scale + logit_bias(a, row, acc_t(j));
    const acc_t factor = state.raise_max(logit);
    const acc_t p = state.weight(logit);
    state.add(p);
    const acc_t u = mix.u(acc_t(j));
    mass += u;
    const scalar_t* value_row = values + j * a.v.row_stride;
#pragma unroll
    for (int s = 0; s < kMaxPerLane; ++s) {
      const int64_t d = lane + s * kWarp;
      const acc_t value = d < Dv ? static_cast<acc_t>(value_row[d]) : acc_t(0);
      acc_a[s] = acc_a[s] * factor + p * value;
      acc_b[s] += u * value;
    }
  }
  const acc_t inv_a = state.inverse_sum();
  const acc_t inv_b = a.normalization == kStrict ? (mass > acc_t(0) ? acc_t(1) / mass : acc_t(0)) : acc_t(1);
  const acc_t g = a.gate[row];
  scalar_t* out_row = o.out.row_of(bh, a.heads, i);
#pragma unroll
  for (int s = 0; s < kMaxPerLane; ++s) {
    const int64_t d = lane + s * kWarp;
    if (d >= Dv) continue;
    o.ctx_a[row * Dv + d] = acc_a[s] * inv_a;
    o.ctx_b[row * Dv + d] = acc_b[s] * inv_b;
    out_row[d] = static_cast<scalar_t>((acc_t(1) - g) * acc_a[s] * inv_a + g * acc_b[s] * inv_b);
  }
  const acc_t lse = state.log_sum_exp();
  if (lane == 0) {
    o.lse[row] = lse;
    o.log_mass[row] = mass > acc_t(0) ? mix.shift + log_of(mass) : negative_infinity<acc_t>();
  }
  if (o.alpha != nullptr) write_row_weights(a, o, row, n_keys, q, mix, lse, inv_b, lane);
}

}  // namespace mma_nmt::gmm::cuda

#include "gmm/cuda/gmm_backward_kernels.cuh"
#include "gmm/cuda/gmm_block_kernels.cuh"
