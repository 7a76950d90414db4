#include "multihop/second_hop_composition.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include "multihop/multihop_params.h"

namespace mma_nmt::multihop {
namespace {

struct Projections {
  at::Tensor query, head, value;  // W_b q_h, U_b_h a_h (B, H, T, Db); U_c_h a_h (B, H, T, Dc), or a without u_c
};

Projections project(const at::Tensor& q, const at::Tensor& a, const at::Tensor& w_b, const at::Tensor& u_b,
                    const std::optional<at::Tensor>& u_c) {
  return {at::matmul(q, w_b.t()),             // (B, H, T, D) @ (D, Db)
          at::matmul(a, u_b.transpose(1, 2)),  // (B, H, T, D) @ (H, D, Db), broadcast over B
          u_c.has_value() ? at::matmul(a, u_c->transpose(1, 2)) : a};
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
  check_second_hop_args("mma_nmt.multihop_second_hop", q, a, w_b, u_b, u_c, v_b);
  const Projections proj = project(q, a, w_b, u_b, u_c);
  auto [out, gate] = head_gate(proj, v_b);
  return {out.contiguous(), gate.contiguous(), at::tanh(proj.query + proj.head)};
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
  const at::Tensor to_a = u_c.has_value() ? at::matmul(grad_value, *u_c) : grad_value;  // (B, H, T, D)
  return {at::matmul(grad_pre, w_b).contiguous(),                    // grad_q (B, H, T, D)
          (at::matmul(grad_pre, u_b) + to_a).contiguous(),            // grad_a: (B, H, T, Db) @ (H, Db, D) + ...
          at::einsum("bhte,bhtd->ed", {grad_pre, q}).contiguous(),   // grad_w_b (Db, D)
          at::einsum("bhte,bhtd->hed", {grad_pre, a}).contiguous(),  // grad_u_b (H, Db, D)
          u_c.has_value() ? at::einsum("bhtc,bhtd->hcd", {grad_value, a}).contiguous() : at::empty({0}, q.options()),
          grad_v_b};
}

}  // namespace mma_nmt::multihop
