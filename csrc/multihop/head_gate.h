// Second hop of multi-hop attention (SPEC section 4) for one query position: MLP attention over the H first-hop head
// outputs and the head gate. Shared by the CPU and CUDA kernels, so the CPU tests exercise the arithmetic the GPU runs.
//
// Per position, with pre_h = W_b q_h + U_b_h a_h (Db values) and c_h = U_c_h a_h (Dc values), both computed by GEMMs
// outside the operator:
//   e_h = v_b . tanh(pre_h),   beta = softmax_h(e),   out_h = beta_h * c_h.
#pragma once

#include "common/host_device.h"

namespace mma_nmt::multihop {

// Largest number of heads the per-position scratch arrays hold.
constexpr int64_t kMaxHeads = 64;

// Tensors are laid out like the first hop's output, (B, H, T, dim): head h of position n = (b, t) is row
// (b * H + h) * T + t. Returns that row index.
MMA_HOST_DEVICE int64_t head_row(int64_t position, int64_t head, int64_t heads, int64_t query_len) {
  const int64_t b = position / query_len, t = position % query_len;
  return (b * heads + head) * query_len + t;
}

// In place: scores[h] -> softmax over the H heads. Always finite (every head takes part).
template <typename acc_t>
MMA_HOST_DEVICE void softmax_over_heads(acc_t* scores, int64_t heads) {
  acc_t max = scores[0];
  for (int64_t h = 1; h < heads; ++h) max = scores[h] > max ? scores[h] : max;
  acc_t sum = 0;
  for (int64_t h = 0; h < heads; ++h) {
    scores[h] = exp_of(scores[h] - max);
    sum += scores[h];
  }
  for (int64_t h = 0; h < heads; ++h) scores[h] /= sum;
}

// In place: grad_gate[h] = dL/dbeta_h  ->  dL/de_h = beta_h * (dL/dbeta_h - sum_g beta_g dL/dbeta_g).
template <typename acc_t>
MMA_HOST_DEVICE void softmax_over_heads_backward(const acc_t* gate, acc_t* grad_gate, int64_t heads) {
  acc_t weighted = 0;
  for (int64_t h = 0; h < heads; ++h) weighted += gate[h] * grad_gate[h];
  for (int64_t h = 0; h < heads; ++h) grad_gate[h] = gate[h] * (grad_gate[h] - weighted);
}

// tanh of one pre-activation element; tanh'(x) = 1 - tanh(x)^2 lets backward recompute instead of storing it.
MMA_HOST_DEVICE float tanh_of(float x) { return tanhf(x); }
MMA_HOST_DEVICE double tanh_of(double x) { return tanh(x); }

// The part of e_h = v_b . tanh(query_proj + head_proj) over hidden units first, first + stride, ... < hop_dim: the
// CUDA kernels' lane share (a warp sums the 32 parts); first 0 and stride 1 give the whole score. Where `hidden` is
// given, the tanh values are also written there (the second hop's saved hidden layer, read back by its backward).
template <typename scalar_t, typename acc_t>
MMA_HOST_DEVICE acc_t head_score_part(const scalar_t* query_proj, const scalar_t* head_proj, const scalar_t* v_b,
                                      int64_t hop_dim, int64_t first, int64_t stride, scalar_t* hidden = nullptr) {
  acc_t e = 0;
  for (int64_t d = first; d < hop_dim; d += stride) {
    const acc_t u = tanh_of(static_cast<acc_t>(query_proj[d]) + static_cast<acc_t>(head_proj[d]));
    if (hidden != nullptr) hidden[d] = static_cast<scalar_t>(u);
    e += static_cast<acc_t>(v_b[d]) * u;
  }
  return e;
}

}  // namespace mma_nmt::multihop
