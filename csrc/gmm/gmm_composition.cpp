#include "gmm/gmm_composition.h"

#include <ATen/ATen.h>

#include <limits>
#include <vector>

#include "attention/attention_composition.h"
#include "attention/head_mask.h"
#include "common/head_layout.h"
#include "common/key_padding.h"
#include "gmm/gmm_math.h"

// The mixture half is gmm_math.h's arithmetic written over whole tensors: the same floor, log-coefficients, strict
// shift and component gradients, evaluated in the statistics' dtype (float for half inputs), as the CPU kernel does.

namespace mma_nmt::gmm {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();
constexpr double kLogSqrtTwoPi = 0.9189385332046727;  // log Z_k = log(sqrt(2 pi)) + log(sigma_k)

// The dot-product half as mma_nmt::attention sees it: every head global, the GMM's scale and key padding.
attention::AttentionParams dot_product_params(const GmmParams& p) {
  attention::AttentionParams a;
  static_cast<AttentionSizes&>(a) = p;
  a.head_kinds.assign(p.heads, attention::kGlobal);
  a.scale = p.scale;
  a.has_key_lengths = p.has_key_lengths;
  return a;
}

// Key positions and each sentence's number of real keys, in the accumulation dtype.
struct KeyGrid {
  at::Tensor positions;  // (1, 1, 1, S): 0, 1, ..., S - 1
  at::Tensor key_count;  // (B, 1, 1, 1): J, key_lengths clamped as the kernels clamp them (keys_of_sentence)
  at::Tensor padding;    // (B, 1, 1, S) bool, true past a sentence's keys; undefined without key_lengths
};

KeyGrid key_grid(const GmmParams& p, const std::optional<at::Tensor>& key_lengths, const at::TensorOptions& acc) {
  KeyGrid g;
  g.positions = at::arange(p.key_len, acc).view({1, 1, 1, p.key_len});
  if (!key_lengths.has_value()) {
    g.key_count = at::full({p.batch, 1, 1, 1}, static_cast<double>(p.key_len), acc);
    return g;
  }
  g.padding = keys_past_sentence(*key_lengths, p.key_len);
  g.key_count = g.padding.logical_not().sum(-1, /*keepdim=*/true).to(acc.dtype());  // the clamped lengths
  return g;
}

// gmm_math.h's Component for every row and component, each (B, H, T, K) in the accumulation dtype.
struct Components {
  at::Tensor omega, mu;
  at::Tensor sigma;       // floored
  at::Tensor sigma_live;  // bool: sigma >= floor, where d/d(sigma) reaches the input
  at::Tensor inv_2var;    // 1 / (2 sigma^2)
  at::Tensor log_coeff;   // a_k = -log Z_k - shift
  at::Tensor shift;       // (B, H, T): the strict-mode shift, else 0
  bool density = true;    // Z = sqrt(2 pi) sigma, or 1 (unnormalised)
};

// gmm_math.h's strict_shift for every row (B, H, T): the largest log(omega_k) + a_k - (j - mu_k)^2 c_k over the
// components with omega_k > 0, at the real key nearest to mu_k; 0 without such a component or without keys.
at::Tensor strict_shift(const Components& c, const KeyGrid& keys) {
  // clamp to [0, J - 1] and round half up; a sentence without keys is fixed below
  const at::Tensor nearest = at::minimum(c.mu.clamp_min(0.0), keys.key_count - 1.0).add_(0.5).floor_();  // (B,H,T,K)
  const at::Tensor d = nearest - c.mu;
  at::Tensor value = c.omega.log() + c.log_coeff - d * d * c.inv_2var;  // (B, H, T, K)
  value.masked_fill_(c.omega.gt(0.0).logical_not_(), -kInfinity);  // NaN weights are left out too
  at::Tensor best = value.amax(-1);  // (B, H, T)
  return best.masked_fill_(best.isneginf() | keys.key_count.squeeze(-1).eq(0.0), 0.0);
}

Components components(const GmmParams& p, const at::Tensor& omega, const at::Tensor& mu, const at::Tensor& sigma,
                      const KeyGrid& keys) {
  const auto acc = keys.positions.scalar_type();
  Components c;
  c.omega = omega.to(acc);
  c.mu = mu.to(acc);
  const at::Tensor raw_sigma = sigma.to(acc);
  c.sigma = raw_sigma.clamp_min(p.sigma_floor);  // NaN stays NaN, as gmm_math.h's floored
  c.sigma_live = raw_sigma.ge(p.sigma_floor);
  c.inv_2var = (c.sigma * c.sigma).reciprocal_().mul_(0.5);
  c.density = p.normalization != kUnnormalised;
  c.log_coeff = c.density ? c.sigma.log().add_(kLogSqrtTwoPi).neg_() : at::zeros_like(c.sigma);
  if (p.normalization == kStrict) {
    c.shift = strict_shift(c, keys);
    c.log_coeff = c.log_coeff - c.shift.unsqueeze(-1);
  } else {
    c.shift = at::zeros_like(c.omega.select(-1, 0));
  }
  return c;
}

// j - mu_k at every key (B, H, T, S).
at::Tensor offsets(const Components& c, int64_t k, const KeyGrid& keys) {
  return keys.positions - c.mu.narrow(-1, k, 1);
}

// Component k's term e = exp(a_k - (j - mu_k)^2 c_k) (B, H, T, S), 0 past each sentence's keys. Masked here, not
// later: in strict mode a narrow component just past the last key can overflow there, and inf * 0 would be NaN.
at::Tensor component_term(const Components& c, int64_t k, const at::Tensor& d, const KeyGrid& keys) {
  at::Tensor e = (c.log_coeff.narrow(-1, k, 1) - d * d * c.inv_2var.narrow(-1, k, 1)).exp_();
  return keys.padding.defined() ? e.masked_fill_(keys.padding, 0.0) : e;
}

// u = sum_k omega_k e_k (B, H, T, S): the unnormalised (shifted) mixture, 0 on padding.
at::Tensor mixture(const Components& c, const KeyGrid& keys) {
  at::Tensor u;
  for (int64_t k = 0; k < c.omega.size(-1); ++k) {
    const at::Tensor term = component_term(c, k, offsets(c, k, keys), keys) * c.omega.narrow(-1, k, 1);
    u = k == 0 ? term : u.add_(term);
  }
  return u;
}

// The factor turning u into beta (B, H, T, 1): 1 / sum_j u_j in strict mode (0 for a row without keys), else 1.
at::Tensor beta_scale(const GmmParams& p, const at::Tensor& mass) {
  if (p.normalization != kStrict) return at::ones_like(mass).unsqueeze(-1);
  return at::where(mass.gt(0.0), mass.reciprocal(), at::zeros_like(mass)).unsqueeze(-1);
}

// The mixture of every row with its sum over the sentence and beta = u * scale.
struct MixtureRows {
  Components comps;
  KeyGrid keys;
  at::Tensor mass;   // (B, H, T): sum_{j<J} u_j
  at::Tensor scale;  // (B, H, T, 1): beta_scale
  at::Tensor beta;   // (B, H, T, S)
};

MixtureRows mixture_rows(const GmmParams& p, const std::optional<at::Tensor>& key_lengths, const at::Tensor& omega,
                         const at::Tensor& mu, const at::Tensor& sigma, at::ScalarType acc) {
  MixtureRows m;
  m.keys = key_grid(p, key_lengths, omega.options().dtype(acc));
  m.comps = components(p, omega, mu, sigma, m.keys);
  const at::Tensor u = mixture(m.comps, m.keys);
  m.mass = u.sum(-1);
  m.scale = beta_scale(p, m.mass);
  m.beta = u * m.scale;
  return m;
}

// Gradients of the mixture parameters, each (B, H, T, K).
struct MixtureGrads {
  at::Tensor omega, mu, sigma;
};

// gmm_math.h's component_grads for every row and component from grad_u = dL/du (B, H, T, S), through the sums
// m0 = sum_j w_j e_j, m1 = sum_j w_j e_j d_j and m2 = sum_j w_j e_j d_j^2 (w = grad_u, d_j = j - mu_k).
MixtureGrads mixture_grads(const Components& c, const KeyGrid& keys, const at::Tensor& grad_u) {
  const int64_t K = c.omega.size(-1);
  std::vector<at::Tensor> m0(K), m1(K), m2(K);
  for (int64_t k = 0; k < K; ++k) {
    const at::Tensor d = offsets(c, k, keys);
    const at::Tensor we = grad_u * component_term(c, k, d, keys);  // (B, H, T, S)
    const at::Tensor wed = we * d;
    m0[k] = we.sum(-1);
    m1[k] = wed.sum(-1);
    m2[k] = (wed * d).sum(-1);
  }
  const at::Tensor s0 = at::stack(m0, -1), s1 = at::stack(m1, -1), s2 = at::stack(m2, -1);  // (B, H, T, K)
  const at::Tensor inv_var = c.inv_2var * 2.0;
  // d/d sigma of -(j - mu)^2 / (2 sigma^2) - log Z = (j - mu)^2 / sigma^3 - [density] / sigma
  const at::Tensor per_sigma = c.density ? inv_var * s2 - s0 : inv_var * s2;
  MixtureGrads g;
  g.omega = s0;
  g.mu = c.omega * inv_var * s1;  // d/d mu of -(j - mu)^2 / (2 sigma^2) = (j - mu) / sigma^2
  g.sigma = at::where(c.sigma_live, c.omega * per_sigma / c.sigma, at::zeros_like(s0));  // 0 below the floor
  return g;
}

// Tensors as an output of q's dtype (gradients, out) or of the statistics' dtype, contiguous.
at::Tensor as_type(const at::Tensor& t, at::ScalarType dtype) { return t.to(dtype).contiguous(); }

}  // namespace

bool composable(const GmmParams& p, bool return_weights) {
  return !return_weights && !p.has_local_bias && !p.wide_mixture && attention::composable(dot_product_params(p), false);
}

std::optional<GmmForwardResult> gmm_forward_by_composition(const GmmParams& p, const at::Tensor& q, const at::Tensor& k,
                                                           const at::Tensor& v,
                                                           const std::optional<at::Tensor>& key_lengths,
                                                           const at::Tensor& omega, const at::Tensor& mu,
                                                           const at::Tensor& sigma, const at::Tensor& gate,
                                                           bool return_weights) {
  if (!composable(p, return_weights)) return std::nullopt;
  // (out = alpha v (B, H, T, Dv) in q's dtype, lse (B, H, T)): zero and -inf in rows without keys, as the kernels
  const auto dot = attention::attention_forward_by_sdpa(dot_product_params(p), q, k, v, key_lengths);
  if (!dot.has_value()) return std::nullopt;
  const at::ScalarType acc = stats_dtype(q.scalar_type());
  const MixtureRows m = mixture_rows(p, key_lengths, omega, mu, sigma, acc);
  // SDPA's output is in q's dtype: for half inputs alpha_context carries half's rounding, where the hand-written
  // kernel keeps it in float (the output it feeds is half anyway).
  const at::Tensor alpha_context = std::get<0>(*dot).to(acc);
  // (B, H, T, S) @ (B, H, S, Dv); padding values zeroed, as beta's 0 there times a NaN would be NaN
  const at::Tensor beta_context = at::matmul(m.beta, without_padding_keys(v, m.keys.padding).to(acc));
  const at::Tensor g = gate.to(acc).unsqueeze(-1);                 // (B, H, T, 1)
  // out = (1 - g) A + g B = lerp(A, B, g), written position-major as the kernels write it (gmm_outputs.h): in place
  // when the statistics' dtype is q's, else converted once
  at::Tensor out = position_major(p.batch, p.heads, p.query_len, p.value_dim, q.options());
  if (acc == q.scalar_type()) {
    at::lerp_out(out, alpha_context, beta_context, g);
  } else {
    out.copy_(at::lerp(alpha_context, beta_context, g));
  }
  // log sum_j of the unshifted mixture: shift + log(mass), -inf without mass
  const at::Tensor log_mass =
      at::where(m.mass.gt(0.0), m.comps.shift + m.mass.log(), at::full_like(m.mass, -kInfinity));
  const at::Tensor no_weights = at::zeros({0}, q.options());
  return GmmForwardResult{out,
                          std::get<1>(*dot),
                          as_type(log_mass, acc),
                          as_type(alpha_context, acc),
                          as_type(beta_context, acc),
                          no_weights,
                          no_weights.clone()};
}

std::optional<GmmBackwardResult> gmm_backward_by_composition(
    const GmmParams& p, const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const std::optional<at::Tensor>& key_lengths, const at::Tensor& omega, const at::Tensor& mu,
    const at::Tensor& sigma, const at::Tensor& gate, const at::Tensor& lse, const at::Tensor& alpha_context,
    const at::Tensor& beta_context) {
  if (!composable(p, /*return_weights=*/false)) return std::nullopt;
  const at::ScalarType dtype = q.scalar_type(), acc = stats_dtype(dtype);
  const at::Tensor g = gate.to(acc).unsqueeze(-1);  // (B, H, T, 1)
  const at::Tensor dout = grad_out.to(acc);         // (B, H, T, Dv)
  // The alpha half is attention with output A = alpha_context and gradient (1 - g) dO: SDPA's backward gives its
  // d(q.k) = (1 - g) alpha_j (dO . v_j - dO . A), hence grad_q, grad_k and grad_v's alpha^T ((1 - g) dO).
  const auto dot = attention::attention_backward_by_sdpa(dot_product_params(p), ((1.0 - g) * dout).to(dtype), q, k, v,
                                                         alpha_context.to(dtype), lse, key_lengths);
  if (!dot.has_value()) return std::nullopt;
  const auto& [grad_q, grad_k, grad_v_alpha] = *dot;

  const at::Tensor delta_a = (dout * alpha_context).sum(-1);  // (B, H, T): dO . A
  const at::Tensor delta_b = (dout * beta_context).sum(-1);   // (B, H, T): dO . B
  // The mass summed again as the forward did, not taken back from log_mass (see gmm_backward.h: that carried
  // log_mass's rounding, |shift| * eps relative).
  const MixtureRows m = mixture_rows(p, key_lengths, omega, mu, sigma, acc);
  const at::Tensor values = without_padding_keys(v, m.keys.padding).to(acc);
  // (B, H, S, Dv) = alpha part + beta^T (B, H, S, T) @ g dO (B, H, T, Dv)
  const at::Tensor grad_v = grad_v_alpha.to(acc) + at::matmul(m.beta.transpose(-1, -2), g * dout);
  // dL/du_j = g (x_j - [strict] dO . B) / U with x_j = dO . v_j: (B, H, T, Dv) @ (B, H, Dv, S)
  at::Tensor x = at::matmul(dout, values.transpose(-1, -2));
  if (p.normalization == kStrict) x = x - delta_b.unsqueeze(-1);
  const at::Tensor grad_u = x * (g * m.scale);  // (B, H, T, S)
  const MixtureGrads grad_mixture = mixture_grads(m.comps, m.keys, grad_u);

  const at::Tensor no_bias = at::empty({0}, q.options());
  return GmmBackwardResult{as_gradient_layout(grad_q.to(dtype), q),  // laid out as the kernels' (gmm_outputs.h)
                           as_gradient_layout(grad_k.to(dtype), k),
                           as_gradient_layout(grad_v.to(dtype), v),
                           as_type(grad_mixture.omega, dtype),
                           as_type(grad_mixture.mu, dtype),
                           as_type(grad_mixture.sigma, dtype),
                           as_type(delta_b - delta_a, dtype),  // dL/dg = dO . (B - A)
                           no_bias,
                           no_bias.clone()};
}

}  // namespace mma_nmt::gmm
