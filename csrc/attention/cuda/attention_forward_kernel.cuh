// Forward pass of mma_nmt::attention on CUDA: one warp per query row, online softmax over the row's visible key interval
// (the tiled kernel, attention_tile_kernels.cuh, takes the calls it serves; this one takes weights and wide heads).
//
// Each lane holds a slice of the query and of the output accumulator (elements lane, lane + 32, ...). For every visible
// key the warp forms the logit with a shuffle reduction, updates the shared OnlineSoftmax state (every lane keeps an
// identical copy, so no broadcast is needed) and adds the key's weighted value row into its slice. Simple rather than
// fast: one key at a time, no shared-memory tiling.
//
// Device source: compiled by nvcc (attention_cuda_forward.cu) and by the host compiler under the HIP CPU emulator
// (tests/cpp/emulated), so it holds no CUDA-only calls; common/cuda_compat.h maps the names it uses.
#pragma once

#include "attention/cuda/warp_row.cuh"  // first: it includes common/cuda_compat.h

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>

#include <tuple>

#include "attention/attention_outputs.h"
#include "attention/cuda/attention_tile_kernels.cuh"
#include "common/online_softmax.h"

namespace mma_nmt::attention::cuda {

template <typename scalar_t>
struct ForwardPointers {
  using acc_t = at::opmath_type<scalar_t>;
  gpu::HeadRows<const scalar_t> q;  // (B, H, T, D), any strides over the first three (common/head_rows.h)
  gpu::HeadRows<const scalar_t> k;  // (B, H, S, D)
  gpu::HeadRows<const scalar_t> v;  // (B, H, S, Dv)
  gpu::HeadRows<scalar_t> out;      // (B, H, T, Dv)
  acc_t* lse;                       // (B, H, T) contiguous; float for half/bfloat16 (lse_dtype)
  scalar_t* probs;                  // (B, H, T, S) contiguous, or nullptr
};

// Second pass for analysis: the weight of every visible key from the finished row's maximum and sum (before dropout).
template <typename scalar_t, int kPerLane, typename acc_t>
__device__ void write_probabilities(const KernelParams& p, const RowCoordinates& r, const acc_t (&q)[kPerLane],
                                    const scalar_t* k, int64_t key_stride, const OnlineSoftmax<acc_t>& state,
                                    scalar_t* probs) {
  const acc_t scale = static_cast<acc_t>(p.scale);
  const int lane = threadIdx.x % kWarpSize;
  for (int64_t j = r.keys.begin; j < r.keys.end; ++j) {
    const acc_t logit = warp_dot<kPerLane>(q, k + j * key_stride, p.head_dim) * scale;
    if (lane == j % kWarpSize) probs[j] = static_cast<scalar_t>(state.probability(logit));
  }
}

template <typename scalar_t, int kPerLane>
__global__ void __launch_bounds__(kMaxWarpsPerBlock* kWarpSize)
    attention_forward_kernel(const KernelParams p, const ForwardPointers<scalar_t> t) {
  using acc_t = at::opmath_type<scalar_t>;
  const RowCoordinates r = locate_row(p);
  if (!r.valid) return;  // the whole warp leaves together, so the shuffles below always see 32 lanes
  const int64_t D = p.head_dim, Dv = p.value_dim, S = p.key_len;
  const scalar_t* k = t.k.head(r.b, r.h);
  const scalar_t* v = t.v.head(r.b, r.h);
  const acc_t scale = static_cast<acc_t>(p.scale);
  const int lane = threadIdx.x % kWarpSize;

  acc_t q[kPerLane], acc[kPerLane];
  load_slice<kPerLane>(t.q.row(r.b, r.h, r.i), D, q);
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) acc[e] = 0;

  OnlineSoftmax<acc_t> state;
  for (int64_t j = r.keys.begin; j < r.keys.end; ++j) {
    const acc_t logit = warp_dot<kPerLane>(q, k + j * t.k.row_stride, D) * scale;
    const acc_t rescale = state.raise_max(logit);
    const acc_t weight = state.weight(logit);
    state.add(weight);  // the softmax sum runs over undropped weights; dropout only thins the output
    const acc_t kept = weight * keep_factor<acc_t>(p, r.row, j);
    const scalar_t* value = v + j * t.v.row_stride;
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) {
      const int64_t d = lane + e * kWarpSize;
      acc[e] = acc[e] * rescale + (d < Dv ? kept * static_cast<acc_t>(value[d]) : acc_t(0));
    }
  }
  // A row without visible keys has inverse_sum 0 and lse -inf: zero output, never NaN.
  store_slice<kPerLane>(t.out.row(r.b, r.h, r.i), Dv, acc, state.inverse_sum());
  const acc_t lse = state.log_sum_exp();
  if (lane == 0) t.lse[r.row] = lse;
  if (t.probs != nullptr) {
    write_probabilities<scalar_t, kPerLane>(p, r, q, k, t.k.row_stride, state, t.probs + r.row * S);
  }
}

template <typename scalar_t, int kPerLane>
void launch_forward(const AttentionParams& p, const ForwardTensors& t, const gpu::Launch& launch) {
  using acc_t = at::opmath_type<scalar_t>;
  const ForwardPointers<scalar_t> ptrs{gpu::head_rows<const scalar_t>(t.q),   gpu::head_rows<const scalar_t>(t.k),
                                       gpu::head_rows<const scalar_t>(t.v),   gpu::head_rows<scalar_t>(t.out),
                                       t.lse.data_ptr<acc_t>(),
                                       t.probs.defined() ? t.probs.data_ptr<scalar_t>() : nullptr};
  gpu::launch_kernel(&attention_forward_kernel<scalar_t, kPerLane>, row_grid(p, launch), row_block(launch), 0, launch,
                     make_kernel_params(p, t.key_lengths), ptrs);
}

// (out, lse, probs) of mma_nmt::attention for checked arguments (attention_cuda.cpp), computed on the launch's stream
// by the tiled kernel (attention_tile_kernels.cuh) where it serves the call, else by the warp-per-row kernel.
inline std::tuple<at::Tensor, at::Tensor, at::Tensor> run_attention_forward(
    const AttentionParams& p, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const std::optional<at::Tensor>& key_lengths, bool return_probs, const gpu::Launch& launch,
    AttentionKernelSet kernels = AttentionKernelSet::kAuto) {
  ForwardOutputs o = allocate_forward_outputs(p, q, return_probs, OutLayout::kPositionMajor);
  // As on the CPU: nothing to compute without a query row; a zero head_dim or value_dim still has weights and lse.
  if (o.lse.numel() == 0) return {o.out, o.lse, o.probs};
  const ForwardTensors t{rows_contiguous(q), rows_contiguous(k), rows_contiguous(v),
                         contiguous_or_undefined(key_lengths), o.out, o.lse, return_probs ? o.probs : at::Tensor()};
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, q.scalar_type(), "mma_nmt::attention cuda forward", [&] {
    const int tile_warps = tile_warps_for<scalar_t>(p, launch, /*backward=*/false, return_probs, kernels);
    if (tile_warps > 0) {
      launch_tile_forward<scalar_t>(p, t, tile_warps, launch);
      return;
    }
    with_values_per_lane(p, [&](auto per_lane) { launch_forward<scalar_t, decltype(per_lane)::value>(p, t, launch); });
  });
  return {o.out, o.lse, o.probs};
}

}  // namespace mma_nmt::attention::cuda
