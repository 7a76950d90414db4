// A C++ autograd Function for the operators shaped like mma_nmt::attention and mma_nmt::shared_value_attention:
//   <op>(q, k, v, key_lengths, *leading_options, return_probs, *trailing_options) -> (out, lse, probs)
//   <op>_backward(grad_out, q, k, v, out, lse, key_lengths, *options) -> (grad_q, grad_k, grad_v)
// with out differentiable in q, k and v, and lse and probs not. What their Python setup_context and backward do
// (mma_nmt/ops/fused_attention.py, shared_value_attention.py), without Python between the kernels.
//
// `Op` names the operator (`static constexpr const char* kSchema = "mma_nmt::attention"`, `kName =
// "mma_nmt.attention"` for messages) and its options (`using Options = std::tuple<...>`: the backward's arguments after
// key_lengths, as the unboxed kernel takes them; the forward takes the first `kOptionsBeforeReturnProbs` of them
// before return_probs and the rest after it).
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/autograd/custom_function.h>

#include <cstddef>
#include <optional>
#include <tuple>
#include <utility>

#include "eager/first_order.h"
#include "eager/optional_tensor.h"

namespace mma_nmt::eager {

template <typename Op>
struct OutLseFunction : torch::autograd::Function<OutLseFunction<Op>> {
  using Options = typename Op::Options;
  using Triple = std::tuple<at::Tensor, at::Tensor, at::Tensor>;
  using variable_list = torch::autograd::variable_list;

  static variable_list forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                               const at::Tensor& v, const std::optional<at::Tensor>& key_lengths,
                               const Options& options, bool return_probs) {
    Triple outputs;
    {
      at::AutoDispatchBelowADInplaceOrView below_autograd;
      outputs = call_forward(q, k, v, key_lengths, options, return_probs, std::make_index_sequence<kBefore>(),
                             std::make_index_sequence<std::tuple_size_v<Options> - kBefore>());
    }
    auto& [out, lse, probs] = outputs;
    ctx->save_for_backward({q, k, v, out, lse, key_lengths.value_or(at::Tensor())});
    ctx->saved_data["options"] = c10::IValue(options);
    ctx->mark_non_differentiable({lse, probs});
    ctx->set_materialize_grads(false);  // lse and probs never get a gradient: no zero tensors made for them
    return {out, lse, probs};
  }

  static variable_list backward(torch::autograd::AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();  // q, k, v, out, lse, key_lengths (or undefined)
    refuse_second_order(Op::kName, saved, grads);
    if (!grads[0].defined()) return variable_list(6);  // out got no gradient: none for q, k, v either
    const auto options = ctx->saved_data["options"].template to<Options>();
    auto [grad_q, grad_k, grad_v] = std::apply(
        [&](const auto&... option) {
          // grad_out as it comes: the kernels read it through its strides or copy it themselves
          return backward_op().call(grads[0], saved[0], saved[1], saved[2], saved[3], saved[4],
                                    optional_tensor(saved[5]), option...);
        },
        options);
    // one entry per forward argument: q, k, v, key_lengths, options, return_probs
    return {grad_q, grad_k, grad_v, at::Tensor(), at::Tensor(), at::Tensor()};
  }

  // The operator with its autograd: the schema's outputs.
  template <typename... OptionArgs>
  static Triple apply_operator(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               const std::optional<at::Tensor>& key_lengths, bool return_probs,
                               OptionArgs&&... options) {
    const variable_list outputs = OutLseFunction::apply(
        q, k, v, key_lengths, Options(std::forward<OptionArgs>(options)...), return_probs);
    return {outputs[0], outputs[1], outputs[2]};
  }

 private:
  static constexpr std::size_t kBefore = Op::kOptionsBeforeReturnProbs;

  template <std::size_t... Before, std::size_t... After>
  static Triple call_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                             const std::optional<at::Tensor>& key_lengths, const Options& options, bool return_probs,
                             std::index_sequence<Before...>, std::index_sequence<After...>) {
    return forward_op().call(q, k, v, key_lengths, std::get<Before>(options)..., return_probs,
                             std::get<kBefore + After>(options)...);
  }

  static const auto& forward_op() {
    static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow(Op::kSchema, "").template typed<
        typename Op::ForwardSignature>();
    return op;
  }

  static const auto& backward_op() {
    static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow(Op::kBackwardSchema, "").template typed<
        typename Op::BackwardSignature>();
    return op;
  }
};

}  // namespace mma_nmt::eager
