// The C++ autograd of the two multi-hop operators for the eager fast path: what the setup_context and backward of
// mma_nmt/ops/multihop.py (mma_nmt::multihop_gate) and mma_nmt/ops/second_hop.py (mma_nmt::multihop_second_hop) do,
// without Python between the kernels. Both return (out, gate, ...) with out and gate differentiable; a gate that got
// no gradient (the usual case: the loss reads out only) is passed to the backward operator as None, and an out that
// got none as zeros.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/zeros.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/autograd/custom_function.h>

#include <optional>
#include <tuple>
#include <vector>

#include "eager/first_order.h"
#include "eager/optional_tensor.h"

namespace mma_nmt::eager::multihop {

using Tensor = at::Tensor;

// grad_out as the kernels take it: as it comes (they read it through its strides), zeros shaped like the gate plus
// `value_dim` when out got no gradient.
inline Tensor grad_out_or_zeros(const Tensor& grad_out, const Tensor& gate, int64_t value_dim) {
  if (grad_out.defined()) return grad_out;
  std::vector<int64_t> shape(gate.sizes().begin(), gate.sizes().end());
  shape.push_back(value_dim);
  return at::zeros(shape, gate.options());
}

}  // namespace mma_nmt::eager::multihop

namespace mma_nmt::eager {

// multihop_gate(query_proj, head_proj, value_proj, v_b) -> (out, gate);
// backward(grad_out, grad_gate?, query_proj, head_proj, value_proj, v_b, gate) -> (grad_pre, grad_value_proj, grad_v_b)
struct HeadGateFunction : torch::autograd::Function<HeadGateFunction> {
  using Tensor = at::Tensor;
  using variable_list = torch::autograd::variable_list;

  // the registered operators (defined before their use: their types are deduced)
  static const auto& forward_op() {
    static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("mma_nmt::multihop_gate", "").typed<
        std::tuple<Tensor, Tensor>(const Tensor&, const Tensor&, const Tensor&, const Tensor&)>();
    return op;
  }

  static const auto& backward_op() {
    static const auto op =
        c10::Dispatcher::singleton().findSchemaOrThrow("mma_nmt::multihop_gate_backward", "").typed<
            std::tuple<Tensor, Tensor, Tensor>(const Tensor&, const std::optional<Tensor>&, const Tensor&,
                                               const Tensor&, const Tensor&, const Tensor&, const Tensor&)>();
    return op;
  }

  static variable_list forward(torch::autograd::AutogradContext* ctx, const Tensor& query_proj,
                               const Tensor& head_proj, const Tensor& value_proj, const Tensor& v_b) {
    std::tuple<Tensor, Tensor> outputs;
    {
      at::AutoDispatchBelowADInplaceOrView below_autograd;
      outputs = forward_op().call(query_proj, head_proj, value_proj, v_b);
    }
    auto& [out, gate] = outputs;
    ctx->save_for_backward({query_proj, head_proj, value_proj, v_b, gate});
    ctx->set_materialize_grads(false);  // a gate without a gradient goes to the kernel as None, not as zeros
    return {out, gate};
  }

  static variable_list backward(torch::autograd::AutogradContext* ctx, variable_list grads) {
    const variable_list s = ctx->get_saved_variables();  // query_proj, head_proj, value_proj, v_b, gate
    refuse_second_order("mma_nmt.multihop_gate", s, grads);
    if (!grads[0].defined() && !grads[1].defined()) return variable_list(4);
    const Tensor grad_out = multihop::grad_out_or_zeros(grads[0], s[4], s[2].size(3));
    auto [grad_pre, grad_value_proj, grad_v_b] =
        backward_op().call(grad_out, optional_tensor(grads[1]), s[0], s[1], s[2], s[3], s[4]);
    return {grad_pre, grad_pre, grad_value_proj, grad_v_b};  // d(query_proj + head_proj) reaches both unchanged
  }

};

// multihop_second_hop(q, a, w_b, u_b, u_c?, v_b) -> (out, gate, hidden), hidden not differentiable;
// backward(grad_out, grad_gate?, q, a, w_b, u_b, u_c?, v_b, gate, hidden)
//   -> (grad_q, grad_a, grad_w_b, grad_u_b, grad_u_c (empty without u_c), grad_v_b)
struct SecondHopFunction : torch::autograd::Function<SecondHopFunction> {
  using Tensor = at::Tensor;
  using OptionalTensor = std::optional<at::Tensor>;
  using Outputs = std::tuple<Tensor, Tensor, Tensor>;
  using Gradients = std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor, Tensor>;
  using variable_list = torch::autograd::variable_list;

  // the registered operators (defined before their use: their types are deduced)
  static const auto& forward_op() {
    static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("mma_nmt::multihop_second_hop", "").typed<
        Outputs(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const OptionalTensor&, const Tensor&)>();
    return op;
  }

  static const auto& backward_op() {
    static const auto op =
        c10::Dispatcher::singleton().findSchemaOrThrow("mma_nmt::multihop_second_hop_backward", "").typed<Gradients(
            const Tensor&, const OptionalTensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
            const OptionalTensor&, const Tensor&, const Tensor&, const Tensor&)>();
    return op;
  }

  static variable_list forward(torch::autograd::AutogradContext* ctx, const Tensor& q, const Tensor& a,
                               const Tensor& w_b, const Tensor& u_b, const OptionalTensor& u_c, const Tensor& v_b) {
    Outputs outputs;
    {
      at::AutoDispatchBelowADInplaceOrView below_autograd;
      outputs = forward_op().call(q, a, w_b, u_b, u_c, v_b);
    }
    auto& [out, gate, hidden] = outputs;
    ctx->save_for_backward({q, a, w_b, u_b, u_c.value_or(Tensor()), v_b, gate, hidden});
    ctx->mark_non_differentiable({hidden});  // backward's input, not a result to differentiate
    ctx->set_materialize_grads(false);
    return {out, gate, hidden};
  }

  static variable_list backward(torch::autograd::AutogradContext* ctx, variable_list grads) {
    const variable_list s = ctx->get_saved_variables();  // q, a, w_b, u_b, u_c (or undefined), v_b, gate, hidden
    refuse_second_order("mma_nmt.multihop_second_hop", s, grads);
    if (!grads[0].defined() && !grads[1].defined()) return variable_list(6);
    const bool has_u_c = s[4].defined();
    const Tensor grad_out = multihop::grad_out_or_zeros(grads[0], s[6], has_u_c ? s[4].size(1) : s[0].size(3));
    auto [grad_q, grad_a, grad_w_b, grad_u_b, grad_u_c, grad_v_b] = backward_op().call(
        grad_out, optional_tensor(grads[1]), s[0], s[1], s[2], s[3], optional_tensor(s[4]), s[5], s[6], s[7]);
    return {grad_q, grad_a, grad_w_b, grad_u_b, has_u_c ? grad_u_c : Tensor(), grad_v_b};
  }

};

}  // namespace mma_nmt::eager
