// The CUDA mma_nmt::multihop_second_hop and its backward for checked arguments: the projections as cuBLAS GEMMs around
// the head-gate kernels of head_gate_kernels.cuh. On a GPU the projections are what cuBLAS does best, and the CPU
// kernel's reason to fuse them (the (B, H, T, ·) projections' trips through memory) is a small cost there.
//   forward: W_b q and U_b a (2 GEMMs), U_c a (a third, with u_c), then the gate kernel, which also writes the saved
//            hidden layer tanh(W_b q + U_b a): 4 launches;
//   backward: U_c a again (with u_c), the gate's backward kernel reading that hidden layer instead of recomputing the
//            two pre-activation products, then the gradients' GEMMs.
// Device-agnostic host code: run by the CUDA operator (multihop_cuda.cu) on the current stream and by
// tests/cpp/emulated on CPU tensors under the HIP CPU emulator, against the CPU operator.
#pragma once

#include "multihop/cuda/head_gate_kernels.cuh"  // first: it includes common/cuda_compat.h

#include <ATen/ATen.h>

#include <optional>
#include <tuple>

#include "common/head_layout.h"
#include "multihop/multihop_params.h"

namespace mma_nmt::multihop::cuda {

// The GEMMs read the (B, H, L, ·) tensors in their memory order. The module's q (a head view of its query
// projection) and a (the first hop's output) are position-major, (B, L, H, ·) in memory (common/head_layout.h): as
// rows of one GEMM that is (B L H, ·) and, for a per-head GEMM, (H, B L, ·), both views. Other layouts are copied into
// that order once; at::matmul would copy a per-head matrix (H, D, E) once per sentence.

inline bool position_major_rows(const at::Tensor& x) { return x.transpose(1, 2).is_contiguous(); }

// x (B, H, L, D) @ w (D, E) -> (B, H, L, E), position-major when x is.
inline at::Tensor rowwise_matmul(const at::Tensor& x, const at::Tensor& w) {
  if (position_major_rows(x)) return at::matmul(x.transpose(1, 2), w).transpose(1, 2);  // on (B, L, H, D) rows
  return at::matmul(x, w);
}

// (B, H, L, D) -> (H, B L, D): a view of a position-major x, else a copy.
inline at::Tensor by_head(const at::Tensor& x) {
  return x.permute({1, 0, 2, 3}).reshape({x.size(1), x.size(0) * x.size(2), x.size(3)});
}

// x (H, B L, D), by_head of a (B, H, L, D) tensor, against one matrix per head, m (H, D, E) -> (B, H, L, E)
// position-major: one batched GEMM over the heads, written in place. x2 and m2 (or undefined): another head-wise
// product of the same shape, added by the same GEMMs' accumulation.
inline at::Tensor per_head_matmul(const at::Tensor& x, const at::Tensor& m, int64_t batch, int64_t len,
                                  const at::Tensor& x2 = {}, const at::Tensor& m2 = {}) {
  const int64_t heads = x.size(0), width = m.size(2);
  at::Tensor result = position_major(batch, heads, len, width, x.options());
  at::Tensor rows = result.permute({1, 0, 2, 3}).view({heads, batch * len, width});  // (H, B L, E) view
  at::bmm_out(rows, x, m);
  if (x2.defined()) rows.baddbmm_(x2, m2);
  return result;
}

// sum over the rows of x_row^T y_row: x (B, H, L, E), y (B, H, L, D) -> (E, D), one GEMM.
inline at::Tensor rowwise_outer(const at::Tensor& x, const at::Tensor& y) {
  if (position_major_rows(x) && position_major_rows(y)) {
    return at::mm(x.transpose(1, 2).reshape({-1, x.size(3)}).t(), y.transpose(1, 2).reshape({-1, y.size(3)}));
  }
  return at::mm(x.reshape({-1, x.size(3)}).t(), y.reshape({-1, y.size(3)}));
}

// per head, sum over (b, l) of x_row^T y_row: x (H, B L, E), y (H, B L, D) (by_head) -> (H, E, D), one batched GEMM.
inline at::Tensor per_head_outer(const at::Tensor& x, const at::Tensor& y) { return at::bmm(x.transpose(1, 2), y); }

// The head gate's sizes for a second hop's.
inline HeadGateParams gate_params(const SecondHopParams& p) {
  return {p.batch, p.heads, p.query_len, p.hop_dim, p.value_dim};
}

// U_c_h a_h (B, H, T, Dc) position-major, or a itself without u_c.
inline at::Tensor value_projection(const at::Tensor& a_by_head, const at::Tensor& a,
                                   const std::optional<at::Tensor>& u_c) {
  return u_c.has_value() ? per_head_matmul(a_by_head, u_c->transpose(1, 2), a.size(0), a.size(2)) : a;
}

// (out, gate, hidden) as mma_nmt::multihop_second_hop, laid out as the CPU kernel lays them out: out and hidden
// position-major, gate (B, H, T) contiguous (common/head_layout.h).
inline std::tuple<at::Tensor, at::Tensor, at::Tensor> run_second_hop_forward(
    const SecondHopParams& p, const at::Tensor& q, const at::Tensor& a, const at::Tensor& w_b, const at::Tensor& u_b,
    const std::optional<at::Tensor>& u_c, const at::Tensor& v_b, const gpu::Launch& launch) {
  const at::Tensor a_by_head = by_head(a);
  const at::Tensor query = rowwise_matmul(q, w_b.t());                                       // (B, H, T, Db)
  const at::Tensor head = per_head_matmul(a_by_head, u_b.transpose(1, 2), p.batch, p.query_len);  // (B, H, T, Db)
  at::Tensor hidden = position_major(p.batch, p.heads, p.query_len, p.hop_dim, q.options());
  auto [out, gate] = run_head_gate_forward(gate_params(p), query, head, value_projection(a_by_head, a, u_c), v_b,
                                           launch, hidden);
  return {out, gate, hidden};
}

// (grad_q, grad_a, grad_w_b, grad_u_b, grad_u_c (empty without u_c), grad_v_b) as
// mma_nmt::multihop_second_hop_backward, grad_q and grad_a laid out like q and a (gradient_like), the weights'
// contiguous.
inline std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> run_second_hop_backward(
    const SecondHopParams& p, const at::Tensor& grad_out, const std::optional<at::Tensor>& grad_gate,
    const at::Tensor& q, const at::Tensor& a, const at::Tensor& w_b, const at::Tensor& u_b,
    const std::optional<at::Tensor>& u_c, const at::Tensor& v_b, const at::Tensor& gate, const at::Tensor& hidden,
    const gpu::Launch& launch) {
  const at::Tensor a_by_head = by_head(a);
  // (B, H, T, Db): the gradient of both pre-activation products; (B, H, T, Dc) of the value projection; (Db,)
  auto [grad_pre, grad_value, grad_v_b] =
      run_head_gate_backward(gate_params(p), grad_out, grad_gate, {}, {}, value_projection(a_by_head, a, u_c), v_b,
                             gate, launch, hidden);
  const at::Tensor pre_by_head = by_head(grad_pre);
  const at::Tensor value_by_head = u_c.has_value() ? by_head(grad_value) : at::Tensor();
  // grad_a = grad_pre U_b (+ grad_value U_c, in the same GEMMs' accumulation), per head
  at::Tensor grad_a = u_c.has_value()
                          ? per_head_matmul(pre_by_head, u_b, p.batch, p.query_len, value_by_head, *u_c)
                          : per_head_matmul(pre_by_head, u_b, p.batch, p.query_len).add_(grad_value);
  return {as_gradient_layout(rowwise_matmul(grad_pre, w_b), q),  // grad_q (B, H, T, D)
          as_gradient_layout(grad_a, a),                          // grad_a (B, H, T, D)
          rowwise_outer(grad_pre, q),                             // grad_w_b (Db, D)
          per_head_outer(pre_by_head, a_by_head),                 // grad_u_b (H, Db, D)
          u_c.has_value() ? per_head_outer(value_by_head, a_by_head) : at::empty({0}, q.options()),
          grad_v_b};
}

}  // namespace mma_nmt::multihop::cuda
