// The C++ autograd of mma_nmt::multilayer_attention for the eager fast path: what the setup_context and backward of
// mma_nmt/ops/multilayer_attention.py do (save the n layers' q, k, the value sets, out, lse and the weights when the
// forward wrote them; backward calls mma_nmt::multilayer_attention_backward on a contiguous grad_out), without Python
// between the kernels. Only out is differentiable. Each tensor of the three Tensor[] arguments is an input of its own
// to autograd (torch::autograd::Function spreads a TensorList), so backward returns one gradient per tensor.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/autograd/custom_function.h>

#include <optional>
#include <tuple>
#include <vector>

#include "eager/first_order.h"
#include "eager/optional_tensor.h"

namespace mma_nmt::eager {

struct MultilayerFunction : torch::autograd::Function<MultilayerFunction> {
  using Tensor = at::Tensor;
  using OptionalTensor = std::optional<at::Tensor>;
  using Tensors = std::vector<at::Tensor>;
  using variable_list = torch::autograd::variable_list;
  using Options = std::tuple<int64_t, double, bool>;  // num_heads, scale, layer_specific
  static constexpr int kOtherInputs = 5;             // key_lengths, num_heads, scale, layer_specific, return_probs

  // the registered operators (defined before their use: their types are deduced)
  static const auto& forward_op() {
    static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("mma_nmt::multilayer_attention", "").typed<
        std::tuple<Tensor, Tensor, Tensor>(at::TensorList, at::TensorList, at::TensorList, const OptionalTensor&,
                                           int64_t, double, bool, bool)>();
    return op;
  }

  static const auto& backward_op() {
    static const auto op =
        c10::Dispatcher::singleton().findSchemaOrThrow("mma_nmt::multilayer_attention_backward", "").typed<
            std::tuple<Tensors, Tensors, Tensors>(const Tensor&, at::TensorList, at::TensorList, at::TensorList,
                                                  const Tensor&, const Tensor&, const OptionalTensor&,
                                                  const OptionalTensor&, int64_t, double, bool)>();
    return op;
  }

  static variable_list forward(torch::autograd::AutogradContext* ctx, at::TensorList q, at::TensorList k,
                               at::TensorList v, const OptionalTensor& key_lengths, int64_t num_heads, double scale,
                               bool layer_specific, bool return_probs) {
    std::tuple<Tensor, Tensor, Tensor> outputs;
    {
      at::AutoDispatchBelowADInplaceOrView below_autograd;
      outputs = forward_op().call(q, k, v, key_lengths, num_heads, scale, layer_specific, return_probs);
    }
    auto& [out, lse, probs] = outputs;
    variable_list saved(q.begin(), q.end());  // q..., k..., v..., out, lse, probs (or undefined), key_lengths (or)
    saved.insert(saved.end(), k.begin(), k.end());
    saved.insert(saved.end(), v.begin(), v.end());
    // The weights, when the forward wrote them, spare the CPU backward recomputing them.
    saved.insert(saved.end(), {out, lse, probs.numel() ? probs : Tensor(), key_lengths.value_or(Tensor())});
    ctx->save_for_backward(saved);
    ctx->saved_data["counts"] = c10::IValue(std::vector<int64_t>{static_cast<int64_t>(q.size()),
                                                                 static_cast<int64_t>(k.size()),
                                                                 static_cast<int64_t>(v.size())});
    ctx->saved_data["options"] = c10::IValue(std::make_tuple(num_heads, scale, layer_specific));
    ctx->mark_non_differentiable({lse, probs});
    ctx->set_materialize_grads(false);  // lse and probs never get a gradient: no zero tensors made for them
    return {out, lse, probs};
  }

  static variable_list backward(torch::autograd::AutogradContext* ctx, variable_list grads) {
    const variable_list s = ctx->get_saved_variables();
    refuse_second_order("mma_nmt.multilayer_attention", s, grads);
    const auto counts = ctx->saved_data["counts"].toIntVector();  // len(q), len(k), len(v)
    const int64_t n_q = counts[0], n_k = counts[1], n_v = counts[2];
    variable_list result(n_q + n_k + n_v + kOtherInputs);  // one entry per tensor of the lists, then the others
    if (!grads[0].defined()) return result;                 // out got no gradient: no input gets one
    const auto [num_heads, scale, layer_specific] = ctx->saved_data["options"].to<Options>();
    const auto list = [&](int64_t start, int64_t n) { return at::TensorList(s.data() + start, n); };
    const int64_t rest = n_q + n_k + n_v;  // out, lse, probs, key_lengths follow the lists
    auto [grad_q, grad_k, grad_v] =
        backward_op().call(grads[0].contiguous(), list(0, n_q), list(n_q, n_k), list(n_q + n_k, n_v), s[rest],
                           s[rest + 1], optional_tensor(s[rest + 2]), optional_tensor(s[rest + 3]), num_heads, scale,
                           layer_specific);
    std::size_t i = 0;
    for (const Tensors* part : {&grad_q, &grad_k, &grad_v}) {
      for (const Tensor& g : *part) result.at(i++) = g;  // the backward operator gives one per tensor of each list
    }
    return result;
  }

};

}  // namespace mma_nmt::eager
