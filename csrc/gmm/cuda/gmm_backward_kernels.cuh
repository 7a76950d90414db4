// Backward CUDA kernels of GMM cross-attention (see csrc/gmm/cpu/gmm_backward.h for the formulas). The row kernel (one
// warp per query row) computes dq, the mixture, gate and local-bias gradients, and leaves four statistics per row for
// the key kernel (one warp per key), which computes dk and dv without atomics. Device source, included from gmm_kernels.cuh.
#pragma once

namespace mma_nmt::gmm::cuda {

constexpr int kMaxComponents = 16;
constexpr int kRowStats = 4;  // delta_a = dO . A, delta_b = dO . B, strict shift, beta scale (1/U or 1)

template <typename scalar_t, typename acc_t>
struct GmmGrads {
  const acc_t *lse, *log_mass, *ctx_a, *ctx_b;
  acc_t* row_stats;  // (B, H, T, kRowStats)
  gpu::HeadRows<scalar_t> dq, dk, dv;  // laid out like q, k and v (gmm_outputs.h)
  MixtureOut<scalar_t, acc_t> domega, dmu, dsigma, dgate, dcenter, dwidth;  // in their inputs' dtype
};

// Writes row statistics and dgate; returns them through the references.
template <typename scalar_t, typename acc_t>
__device__ void row_statistics(const GmmArgs<scalar_t, acc_t>& a, const GmmGrads<scalar_t, acc_t>& gr, int64_t row,
                               const acc_t (&dout)[kMaxPerLane], acc_t shift, int lane, acc_t& delta_a,
                               acc_t& delta_b, acc_t& beta_scale) {
  delta_a = warp_dot(dout, gr.ctx_a + row * a.value_dim, a.value_dim);
  delta_b = warp_dot(dout, gr.ctx_b + row * a.value_dim, a.value_dim);
  const acc_t log_mass = gr.log_mass[row];
  beta_scale = acc_t(1);
  if (a.normalization == kStrict) {
    beta_scale = log_mass == negative_infinity<acc_t>() ? acc_t(0) : exp_of(shift - log_mass);
  }
  if (lane == 0) {
    acc_t* stats = gr.row_stats + row * kRowStats;
    stats[0] = delta_a;
    stats[1] = delta_b;
    stats[2] = shift;
    stats[3] = beta_scale;
    gr.dgate.set(row, delta_b - delta_a);
  }
}

template <typename scalar_t, typename acc_t>
__global__ void gmm_backward_rows_kernel(GmmArgs<scalar_t, acc_t> a, GmmGrads<scalar_t, acc_t> gr) {
  const int lane = threadIdx.x % kWarp;
  const int64_t row = warp_index();
  if (row >= a.batch * a.heads * a.query_len) return;
  const int64_t bh = row / a.query_len, i = row % a.query_len, n_keys = keys_of(a, row), D = a.head_dim;
  const int64_t K = a.components;
  acc_t q[kMaxPerLane], dout[kMaxPerLane], dq[kMaxPerLane] = {};
  const scalar_t* keys = a.k.row_of(bh, a.heads, 0);  // rows a.k.row_stride apart, as the values'
  const scalar_t* values = a.v.row_of(bh, a.heads, 0);
  load_slice(a.q.row_of(bh, a.heads, i), D, q);
  load_slice(a.dout.row_of(bh, a.heads, i), a.value_dim, dout);
  const RowMixture<scalar_t, acc_t> mix = row_mixture(a, row, n_keys);
  acc_t delta_a, delta_b, beta_scale;
  row_statistics(a, gr, row, dout, mix.shift, lane, delta_a, delta_b, beta_scale);
  const acc_t g = a.gate[row], lse = gr.lse[row];
  const acc_t beta_delta = a.normalization == kStrict ? delta_b : acc_t(0);
  const acc_t center = a.center.present() ? a.center[row] : acc_t(0);
  acc_t m0[kMaxComponents] = {}, m1[kMaxComponents] = {}, m2[kMaxComponents] = {}, n1 = 0, n2 = 0;
  for (int64_t j = 0; j < n_keys; ++j) {
    const scalar_t* key = keys + j * a.k.row_stride;
    const acc_t logit = warp_dot(q, key, D) * a.scale + logit_bias(a, row, acc_t(j));
    const acc_t p = exp_of(logit - lse);
    const acc_t dov = warp_dot(dout, values + j * a.v.row_stride, a.value_dim);
    const acc_t ds = (acc_t(1) - g) * p * (dov - delta_a);
    n1 += ds * (acc_t(j) - center);
    n2 += ds * (acc_t(j) - center) * (acc_t(j) - center);
#pragma unroll
    for (int s = 0; s < kMaxPerLane; ++s) {
      const int64_t d = lane + s * kWarp;
      if (d < D) dq[s] += ds * a.scale * static_cast<acc_t>(key[d]);
    }
    const acc_t w = g * (dov - beta_delta) * beta_scale;
    for (int64_t k = 0; k < K; ++k) {
      const Component<acc_t> c = mix.component(k);
      const acc_t dist = acc_t(j) - c.mu, we = w * component_term(c, acc_t(j));
      m0[k] += we;
      m1[k] += we * dist;
      m2[k] += we * dist * dist;
    }
  }
  scalar_t* dq_row = gr.dq.row_of(bh, a.heads, i);
#pragma unroll
  for (int s = 0; s < kMaxPerLane; ++s) {
    const int64_t d = lane + s * kWarp;
    if (d < D) dq_row[d] = static_cast<scalar_t>(dq[s]);
  }
  if (lane != 0) return;
  for (int64_t k = 0; k < K; ++k) {
    const ComponentGrads<acc_t> cg = component_grads(mix.component(k), m0[k], m1[k], m2[k]);
    gr.domega.set(row * K + k, cg.omega);
    gr.dmu.set(row * K + k, cg.mu);
    gr.dsigma.set(row * K + k, cg.sigma);
  }
  if (a.center.present()) {
    const LocalBiasRow<acc_t> r = make_local_bias<acc_t>(center, a.width[row], a.floor);
    gr.dcenter.set(row, local_center_grad(r, n1));
    gr.dwidth.set(row, local_width_grad(r, n2));
  }
}

template <typename scalar_t, typename acc_t>
__global__ void gmm_backward_keys_kernel(GmmArgs<scalar_t, acc_t> a, GmmGrads<scalar_t, acc_t> gr) {
  const int lane = threadIdx.x % kWarp;
  const int64_t key_index = warp_index();
  if (key_index >= a.batch * a.heads * a.key_len) return;
  const int64_t bh = key_index / a.key_len, j = key_index % a.key_len, D = a.head_dim, Dv = a.value_dim;
  // Padding keys get zero gradients, written here (the gradients come uninitialised), and are never read.
  const int64_t n_queries = j < keys_of(a, bh * a.query_len) ? a.query_len : 0;
  acc_t key[kMaxPerLane] = {}, value[kMaxPerLane] = {}, dk[kMaxPerLane] = {}, dv[kMaxPerLane] = {};
  if (n_queries > 0) {
    load_slice(a.k.row_of(bh, a.heads, j), D, key);
    load_slice(a.v.row_of(bh, a.heads, j), Dv, value);
  }
  const scalar_t* head_queries = a.q.row_of(bh, a.heads, 0);  // rows a.q.row_stride apart
  const scalar_t* head_douts = a.dout.row_of(bh, a.heads, 0);
  for (int64_t i = 0; i < n_queries; ++i) {
    const int64_t row = bh * a.query_len + i;
    const acc_t* stats = gr.row_stats + row * kRowStats;
    const scalar_t* q = head_queries + i * a.q.row_stride;
    const scalar_t* dout = head_douts + i * a.dout.row_stride;
    const acc_t logit = warp_dot(key, q, D) * a.scale + logit_bias(a, row, acc_t(j));
    const acc_t p = exp_of(logit - gr.lse[row]);
    const acc_t dov = warp_dot(value, dout, Dv);
    const acc_t g = a.gate[row];
    const acc_t ds = (acc_t(1) - g) * p * (dov - stats[0]) * a.scale;
    const int64_t first = row * a.components;
    RowMixture<scalar_t, acc_t> mix{a.omega.at(first), a.mu.at(first), a.sigma.at(first), a.components,
                                    a.normalization, a.floor, stats[2]};
    const acc_t gamma = (acc_t(1) - g) * p + g * mix.u(acc_t(j)) * stats[3];
#pragma unroll
    for (int s = 0; s < kMaxPerLane; ++s) {
      const int64_t d = lane + s * kWarp;
      if (d < D) dk[s] += ds * static_cast<acc_t>(q[d]);
      if (d < Dv) dv[s] += gamma * static_cast<acc_t>(dout[d]);
    }
  }
  scalar_t* dk_row = gr.dk.row_of(bh, a.heads, j);
  scalar_t* dv_row = gr.dv.row_of(bh, a.heads, j);
#pragma unroll
  for (int s = 0; s < kMaxPerLane; ++s) {
    const int64_t d = lane + s * kWarp;
    if (d < D) dk_row[d] = static_cast<scalar_t>(dk[s]);
    if (d < Dv) dv_row[d] = static_cast<scalar_t>(dv[s]);
  }
}

}  // namespace mma_nmt::gmm::cuda
