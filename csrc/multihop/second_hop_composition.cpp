#include "multihop/second_hop_composition.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include "common/head_layout.h"
#include "multihop/multihop_params.h"

namespace mma_nmt::multihop {
namespace {

// The GEMMs read the (B, H, L, ·) tensors in their memory order. The module's q (a head view of its query
// projection) and a (the first hop's output) are position-major, (B, L, H, ·) in memory (common/head_layout.h): as
// rows of one GEMM that is (B L H, ·) and, for a per-head GEMM, (H, B L, ·), both views. Other layouts are copied into
// that order once; at::matmul would copy a per-head matrix (H, D, E) once per sentence.

bool position_major_rows(const at::Tensor& x) { return x.transpose(1, 2).is_contiguous(); }

// x (B, H, L, D) @ w (D, E) -> (B, H, L, E), position-major when x is.
at::Tensor rowwise_matmul(const at::Tensor& x, const at::Tensor& w) {
  if (position_major_rows(x)) return at::matmul(x.transpose(1, 2), w).transpose(1, 2);  // on (B, L, H, D) rows
  return at::matmul(x, w);
}

// (B, H, L, D) -> (H, B L, D): a view of a position-major x, else a copy.
at::Tensor by_head(const at::Tensor& x) {
  return x.permute({1, 0, 2, 3}).reshape({x.size(1), x.size(0) * x.size(2), x.size(3)});
}

// x (H, B L, D), by_head of a (B, H, L, D) tensor, against one matrix per head, m (H, D, E) -> (B, H, L, E)
// position-major: one batched GEMM over the heads, written in place. x2 and m2 (or undefined): another head-wise
// product of the same shape, added by the same GEMMs' accumulation.
at::Tensor per_head_matmul(const at::Tensor& x, const at::Tensor& m, int64_t batch, int64_t len,
                           const at::Tensor& x2 = {}, const at::Tensor& m2 = {}) {
  const int64_t heads = x.size(0), width = m.size(2);
  at::Tensor result = position_major(batch, heads, len, width, x.options());
  at::Tensor rows = result.permute({1, 0, 2, 3}).view({heads, batch * len, width});  // (H, B L, E) view
  at::bmm_out(rows, x, m);
  if (x2.defined()) rows.baddbmm_(x2, m2);
  return result;
}

// sum over the rows of x_row^T y_row: x (B, H, L, E), y (B, H, L, D) -> (E, D), one GEMM.
at::Tensor rowwise_outer(const at::Tensor& x, const at::Tensor& y) {
  if (position_major_rows(x) && position_major_rows(y)) {
    return at::mm(x.transpose(1, 2).reshape({-1, x.size(3)}).t(), y.transpose(1, 2).reshape({-1, y.size(3)}));
  }
  return at::mm(x.reshape({-1, x.size(3)}).t(), y.reshape({-1, y.size(3)}));
}

// per head, sum over (b, l) of x_row^T y_row: x (H, B L, E), y (H, B L, D) (by_head) -> (H, E, D), one batched GEMM.
at::Tensor per_head_outer(const at::Tensor& x, const at::Tensor& y) { return at::bmm(x.transpose(1, 2), y); }

struct Projections {
  at::Tensor query, head, value;  // W_b q_h, U_b_h a_h (B, H, T, Db); U_c_h a_h (B, H, T, Dc), or a without u_c
  at::Tensor a_by_head;           // a as (H, B T, D)
};

Projections project(const at::Tensor& q, const at::Tensor& a, const at::Tensor& w_b, const at::Tensor& u_b,
                    const std::optional<at::Tensor>& u_c) {
  const at::Tensor a_by_head = by_head(a);
  const int64_t batch = a.size(0), len = a.size(2);
  return {rowwise_matmul(q, w_b.t()),                                    // (B, H, T, D) @ (D, Db)
          per_head_matmul(a_by_head, u_b.transpose(1, 2), batch, len),    // (B, H, T, D) @ (H, D, Db)
          u_c.has_value() ? per_head_matmul(a_by_head, u_c->transpose(1, 2), batch, len) : a, a_by_head};
}

std::tuple<at::Tensor, at::Tensor> head_gate(const Projections& proj, const at::Tensor& v_b) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("mma_nmt::multihop_gate", "")
                             .typed<std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&,
                                                                       const at::Tensor&, const at::Tensor&)>();
  return op.call(proj.query, proj.head, proj.value, v_b);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> head_gate_backward(const at::Tensor& grad_out,
                                                                  const std::optional<at::Tensor>& grad_gate,
                                                                  const Projections& proj, const at::Tensor& v_b,
                                                                  const at::Tensor& gate) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("mma_nmt::multihop_gate_backward", "")
          .typed<std::tuple<at::Tensor, at::Tensor, at::Tensor>(
              const at::Tensor&, const std::optional<at::Tensor>&, const at::Tensor&, const at::Tensor&,
              const at::Tensor&, const at::Tensor&, const at::Tensor&)>();
  return op.call(grad_out, grad_gate, proj.query, proj.head, proj.value, v_b, gate);
}

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor> multihop_second_hop_by_composition(
    const at::Tensor& q, const at::Tensor& a, const at::Tensor& w_b, const at::Tensor& u_b,
    const std::optional<at::Tensor>& u_c, const at::Tensor& v_b) {
  const SecondHopParams p = check_second_hop_args("mma_nmt.multihop_second_hop", q, a, w_b, u_b, u_c, v_b);
  const Projections proj = project(q, a, w_b, u_b, u_c);
  auto [out, gate] = head_gate(proj, v_b);  // out position-major (the gate kernels allocate it so), gate (B, H, T)
  at::Tensor hidden = position_major(p.batch, p.heads, p.query_len, p.hop_dim, q.options());
  at::add_out(hidden, proj.query, proj.head).tanh_();
  return {out, gate, hidden};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
multihop_second_hop_backward_by_composition(const at::Tensor& grad_out, const std::optional<at::Tensor>& grad_gate,
                                            const at::Tensor& q, const at::Tensor& a, const at::Tensor& w_b,
                                            const at::Tensor& u_b, const std::optional<at::Tensor>& u_c,
                                            const at::Tensor& v_b, const at::Tensor& gate, const at::Tensor& hidden) {
  const char* op = "mma_nmt.multihop_second_hop_backward";
  const SecondHopParams p = check_second_hop_args(op, q, a, w_b, u_b, u_c, v_b);
  check_second_hop_backward_extras(op, p, q, grad_out, grad_gate, gate, hidden);
  const Projections proj = project(q, a, w_b, u_b, u_c);
  // (B, H, T, Db): the gradient of both pre-activation products; (B, H, T, Dc) of the value projection; (Db,)
  auto [grad_pre, grad_value, grad_v_b] = head_gate_backward(grad_out, grad_gate, proj, v_b, gate);
  const at::Tensor pre_by_head = by_head(grad_pre);
  const at::Tensor value_by_head = u_c.has_value() ? by_head(grad_value) : at::Tensor();
  // grad_a = grad_pre U_b (+ grad_value U_c, in the same GEMMs' accumulation), per head
  at::Tensor grad_a = u_c.has_value()
                         ? per_head_matmul(pre_by_head, u_b, p.batch, p.query_len, value_by_head, *u_c)
                         : per_head_matmul(pre_by_head, u_b, p.batch, p.query_len).add_(grad_value);
  return {as_gradient_layout(rowwise_matmul(grad_pre, w_b), q),  // grad_q (B, H, T, D)
          as_gradient_layout(grad_a, a),                          // grad_a (B, H, T, D)
          rowwise_outer(grad_pre, q),                             // grad_w_b (Db, D)
          per_head_outer(pre_by_head, proj.a_by_head),            // grad_u_b (H, Db, D)
          u_c.has_value() ? per_head_outer(value_by_head, proj.a_by_head) : at::empty({0}, q.options()),
          grad_v_b};
}

}  // namespace mma_nmt::multihop
