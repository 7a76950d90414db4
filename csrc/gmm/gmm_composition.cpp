#include "gmm/gmm_composition.h"

#include <ATen/ATen.h>

#include "attention/attention_composition.h"
#include "attention/head_mask.h"
#include "attention/operator_kernels.h"
#include "common/head_layout.h"
#include "common/key_padding.h"

// The dot-product half is `kernels.dot` (mma_nmt::attention with every head global), the mixture half
// `kernels.mixture` (mixture_passes.h: one pass over each row's keys each way, in the statistics' dtype, float for half
// inputs), around the batched GEMMs with v.

namespace mma_nmt::gmm {
namespace {

// The dot-product half as mma_nmt::attention sees it: every head global, the GMM's scale and key padding.
attention::AttentionParams dot_product_params(const GmmParams& p) {
  attention::AttentionParams a;
  static_cast<AttentionSizes&>(a) = p;
  a.head_kinds.assign(p.heads, attention::kGlobal);
  a.scale = p.scale;
  a.has_key_lengths = p.has_key_lengths;
  return a;
}

// Tensors as an output of q's dtype (gradients, out) or of the statistics' dtype, contiguous.
at::Tensor as_type(const at::Tensor& t, at::ScalarType dtype) { return t.to(dtype).contiguous(); }

}  // namespace

CompositionKernels cpu_composition_kernels() {
  return {attention::dispatched_attention_kernels(), cpu_mixture_passes()};
}

bool composable(const GmmParams& p, bool return_weights) {
  return !return_weights && !p.has_local_bias && attention::splittable(dot_product_params(p), false);
}

std::optional<GmmForwardResult> gmm_forward_by_composition(const GmmParams& p, const at::Tensor& q, const at::Tensor& k,
                                                           const at::Tensor& v,
                                                           const std::optional<at::Tensor>& key_lengths,
                                                           const at::Tensor& omega, const at::Tensor& mu,
                                                           const at::Tensor& sigma, const at::Tensor& gate,
                                                           bool return_weights, const CompositionKernels& kernels) {
  if (!composable(p, return_weights)) return std::nullopt;
  // (out = alpha v (B, H, T, Dv) in q's dtype, lse (B, H, T)): zero and -inf in rows without keys, as the kernels
  const auto [alpha_out, lse, no_probs] = kernels.dot.forward(dot_product_params(p), q, k, v, key_lengths);
  const at::ScalarType acc = stats_dtype(q.scalar_type());
  const MixtureForward m = kernels.mixture.forward(p, mixture_inputs(omega, mu, sigma, key_lengths, acc));
  // The attention's output is in q's dtype: for half inputs alpha_context carries half's rounding, where the
  // hand-written GMM kernel keeps it in float (the output it feeds is half anyway).
  const at::Tensor alpha_context = alpha_out.to(acc);
  // (B, H, T, S) @ (B, H, S, Dv); padding values zeroed, as beta's 0 there times a NaN would be NaN
  const at::Tensor values = without_padding_keys(v, padding_mask(key_lengths, p.key_len)).to(acc);
  const at::Tensor beta_context = at::matmul(m.beta, values);
  const at::Tensor g = gate.to(acc).unsqueeze(-1);                 // (B, H, T, 1)
  // out = (1 - g) A + g B = lerp(A, B, g), written position-major as the kernels write it (gmm_outputs.h): in place
  // when the statistics' dtype is q's, else converted once
  at::Tensor out = position_major(p.batch, p.heads, p.query_len, p.value_dim, q.options());
  if (acc == q.scalar_type()) {
    at::lerp_out(out, alpha_context, beta_context, g);
  } else {
    out.copy_(at::lerp(alpha_context, beta_context, g));
  }
  const at::Tensor no_weights = at::empty({0}, q.options());  // nothing to fill or copy: no launch
  return GmmForwardResult{out,
                          lse,
                          m.log_mass,
                          as_type(alpha_context, acc),
                          as_type(beta_context, acc),
                          no_weights,
                          at::empty({0}, q.options())};
}

std::optional<GmmBackwardResult> gmm_backward_by_composition(
    const GmmParams& p, const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const std::optional<at::Tensor>& key_lengths, const at::Tensor& omega, const at::Tensor& mu,
    const at::Tensor& sigma, const at::Tensor& gate, const at::Tensor& lse, const at::Tensor& alpha_context,
    const at::Tensor& beta_context, const CompositionKernels& kernels) {
  if (!composable(p, /*return_weights=*/false)) return std::nullopt;
  const at::ScalarType dtype = q.scalar_type(), acc = stats_dtype(dtype);
  const at::Tensor g = gate.to(acc).unsqueeze(-1);  // (B, H, T, 1)
  const at::Tensor dout = grad_out.to(acc);         // (B, H, T, Dv)
  // The alpha half is attention with output A = alpha_context and gradient (1 - g) dO: its backward gives
  // d(q.k) = (1 - g) alpha_j (dO . v_j - dO . A), hence grad_q, grad_k and grad_v's alpha^T ((1 - g) dO).
  const auto [grad_q, grad_k, grad_v_alpha] = kernels.dot.backward(
      dot_product_params(p), ((1.0 - g) * dout).to(dtype), q, k, v, alpha_context.to(dtype), lse, key_lengths);

  const at::Tensor delta_a = (dout * alpha_context).sum(-1);  // (B, H, T): dO . A
  const at::Tensor values = without_padding_keys(v, padding_mask(key_lengths, p.key_len)).to(acc);
  // x_j = dO . v_j: (B, H, T, Dv) @ (B, H, Dv, S). The pass forms dL/du_j = g (x_j - [strict] dO . B) scale from it,
  // and beta again (the mass summed as the forward did, not taken back from log_mass: see gmm_backward.h).
  const at::Tensor x = at::matmul(dout, values.transpose(-1, -2));
  const MixtureBackward m = kernels.mixture.backward(p, mixture_inputs(omega, mu, sigma, key_lengths, acc),
                                                     gate.to(acc).contiguous(), x.contiguous());
  // (B, H, S, Dv) = alpha part + beta^T (B, H, S, T) @ g dO (B, H, T, Dv)
  const at::Tensor grad_v = grad_v_alpha.to(acc) + at::matmul(m.beta.transpose(-1, -2), g * dout);

  const at::Tensor no_bias = at::empty({0}, q.options());
  return GmmBackwardResult{as_gradient_layout(grad_q.to(dtype), q),  // laid out as the kernels' (gmm_outputs.h)
                           as_gradient_layout(grad_k.to(dtype), k),
                           as_gradient_layout(grad_v.to(dtype), v),
                           as_type(m.grad_omega, omega.scalar_type()),  // the mixture's dtype: q's, or float32
                           as_type(m.grad_mu, mu.scalar_type()),
                           as_type(m.grad_sigma, sigma.scalar_type()),
                           as_type(m.delta_b - delta_a, gate.scalar_type()),  // dL/dg = dO . (B - A)
                           no_bias,
                           no_bias.clone()};
}

}  // namespace mma_nmt::gmm
