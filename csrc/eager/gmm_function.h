// The C++ autograd of mma_nmt::gmm_attention for the eager fast path: what mma_nmt/ops/gmm_attention.py's
// setup_context and backward do (save the inputs and lse, log_mass, alpha_context and beta_context; backward calls
// mma_nmt::gmm_attention_backward on a contiguous grad_out), without Python between the kernels. Only `out` is
// differentiable; local_center and local_width get gradients when they were given.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/autograd/custom_function.h>

#include <optional>
#include <tuple>

#include "eager/first_order.h"
#include "eager/optional_tensor.h"

namespace mma_nmt::eager {

struct GmmFunction : torch::autograd::Function<GmmFunction> {
  using Tensor = at::Tensor;
  using OptionalTensor = std::optional<at::Tensor>;
  using Outputs = std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor>;
  using Gradients = std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor>;
  using variable_list = torch::autograd::variable_list;
  static constexpr int kInputs = 14;  // the schema's arguments

  static const auto& forward_op() {
    static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("mma_nmt::gmm_attention", "").typed<Outputs(
        const Tensor&, const Tensor&, const Tensor&, const OptionalTensor&, const Tensor&, const Tensor&,
        const Tensor&, const Tensor&, const OptionalTensor&, const OptionalTensor&, double, int64_t, double, bool)>();
    return op;
  }

  static const auto& backward_op() {
    static const auto op =
        c10::Dispatcher::singleton().findSchemaOrThrow("mma_nmt::gmm_attention_backward", "").typed<Gradients(
            const Tensor&, const Tensor&, const Tensor&, const Tensor&, const OptionalTensor&, const Tensor&,
            const Tensor&, const Tensor&, const Tensor&, const OptionalTensor&, const OptionalTensor&, const Tensor&,
            const Tensor&, const Tensor&, const Tensor&, double, int64_t, double)>();
    return op;
  }

  static variable_list forward(torch::autograd::AutogradContext* ctx, const Tensor& q, const Tensor& k,
                               const Tensor& v, const OptionalTensor& key_lengths, const Tensor& omega,
                               const Tensor& mu, const Tensor& sigma, const Tensor& gate,
                               const OptionalTensor& local_center, const OptionalTensor& local_width, double scale,
                               int64_t normalization, double sigma_floor, bool return_weights) {
    Outputs outputs;
    {
      at::AutoDispatchBelowADInplaceOrView below_autograd;
      outputs = forward_op().call(q, k, v, key_lengths, omega, mu, sigma, gate, local_center, local_width, scale,
                                  normalization, sigma_floor, return_weights);
    }
    auto& [out, lse, log_mass, alpha_context, beta_context, alpha, beta] = outputs;
    ctx->save_for_backward({q, k, v, key_lengths.value_or(Tensor()), omega, mu, sigma, gate,
                            local_center.value_or(Tensor()), local_width.value_or(Tensor()), lse, log_mass,
                            alpha_context, beta_context});
    ctx->saved_data["options"] = c10::IValue(std::make_tuple(scale, normalization, sigma_floor));
    ctx->mark_non_differentiable({lse, log_mass, alpha_context, beta_context, alpha, beta});
    ctx->set_materialize_grads(false);  // only out is differentiable: no zero tensors for the other six
    return {out, lse, log_mass, alpha_context, beta_context, alpha, beta};
  }

  static variable_list backward(torch::autograd::AutogradContext* ctx, variable_list grads) {
    const variable_list s = ctx->get_saved_variables();  // in the order saved above
    refuse_second_order("mma_nmt.gmm_attention", s, grads);
    if (!grads[0].defined()) return variable_list(kInputs);  // out got no gradient: no input gets one
    const auto [scale, normalization, sigma_floor] =
        ctx->saved_data["options"].to<std::tuple<double, int64_t, double>>();
    auto [grad_q, grad_k, grad_v, grad_omega, grad_mu, grad_sigma, grad_gate, grad_center, grad_width] =
        backward_op().call(grads[0], s[0], s[1], s[2], optional_tensor(s[3]), s[4], s[5], s[6], s[7],
                           optional_tensor(s[8]), optional_tensor(s[9]), s[10], s[11], s[12], s[13], scale,
                           normalization, sigma_floor);
    const bool has_local = s[8].defined();  // without the bias its gradients are (0,) placeholders
    variable_list result(kInputs);
    result[0] = grad_q, result[1] = grad_k, result[2] = grad_v;
    result[4] = grad_omega, result[5] = grad_mu, result[6] = grad_sigma, result[7] = grad_gate;
    if (has_local) result[8] = grad_center, result[9] = grad_width;
    return result;
  }
};

}  // namespace mma_nmt::eager
