// Arithmetic of the Gaussian-mixture term of GMM cross-attention (SPEC section 5), shared by the CPU and CUDA kernels so
// that the CPU tests exercise what the GPU runs.
//
// For one query row with K components (omega_k, mu_k, sigma_k) the kernels evaluate, at key position j (0-based),
//   u_j = sum_k omega_k * exp(a_k - (j - mu_k)^2 * c_k),   c_k = 1 / (2 sigma_k^2),   a_k = -log Z_k - shift,
// with Z_k = sqrt(2 pi) sigma_k (density modes) or 1 (unnormalised mode). The row's shift is 0 except in strict mode,
// where it is the largest log-term of the row, found in O(K) (the nearest real key to each mean), so that the row sum
// U = sum_{j<J} u_j >= exp(0) of that key's term and never underflows to 0; beta_j = u_j / U. Without the shift,
// beta_j = u_j is the SPEC formula exactly.
#pragma once

#include "common/host_device.h"

namespace mma_nmt::gmm {

// Values are part of the operator schema (`normalization`); Python mirrors them in mma_nmt/ops/gmm_attention.py.
enum Normalization : int64_t {
  kApproximate = 0,   // Z = sqrt(2 pi) sigma, no renormalisation (the paper's default; sigma is limited in Python)
  kStrict = 1,        // Z = sqrt(2 pi) sigma, then beta divided by its sum over the sentence
  kUnnormalised = 2,  // Z = 1 (synthesis network)
};
constexpr int64_t kNumNormalizations = 3;

// sigma floored at `floor`; the gradient reaches sigma only where sigma >= floor (torch.clamp_min's convention). A NaN
// stays NaN, as in torch.clamp_min: NaN in must give NaN out, not a finite output that hides divergence.
template <typename acc_t>
MMA_HOST_DEVICE acc_t floored(acc_t sigma, acc_t floor) {
  return sigma < floor ? floor : sigma;
}

// Per-component constants of one row, computed once and reused for every key.
template <typename acc_t>
struct Component {
  acc_t omega;      // weight (>= 0 for a meaningful mixture; the kernels do not require it)
  acc_t mu;         // mean, in key positions
  acc_t sigma;      // floored standard deviation
  acc_t inv_2var;   // 1 / (2 sigma^2)
  acc_t log_coeff;  // a_k = -log Z_k - shift
  bool sigma_live;  // whether d/d(sigma) reaches the unfloored input
  bool density;     // Z = sqrt(2 pi) sigma (true) or 1
};

// As make_component, given log(floored(sigma, floor)) (unused in unnormalised mode): the CPU kernels take the logs of a
// block's sigmas with one vectorised call.
template <typename acc_t>
MMA_HOST_DEVICE Component<acc_t> make_component_from_log(acc_t omega, acc_t mu, acc_t sigma, acc_t floor,
                                                         int64_t normalization, acc_t log_floored_sigma) {
  Component<acc_t> c;
  c.omega = omega;
  c.mu = mu;
  c.sigma = floored(sigma, floor);
  c.sigma_live = sigma >= floor;
  c.inv_2var = acc_t(0.5) / (c.sigma * c.sigma);
  c.density = normalization != kUnnormalised;
  // log(sqrt(2 pi)) = 0.9189385332046727
  c.log_coeff = c.density ? -(acc_t(0.9189385332046727) + log_floored_sigma) : acc_t(0);
  return c;
}

template <typename acc_t>
MMA_HOST_DEVICE Component<acc_t> make_component(acc_t omega, acc_t mu, acc_t sigma, acc_t floor,
                                                int64_t normalization) {
  const acc_t log_sigma = normalization != kUnnormalised ? log_of(floored(sigma, floor)) : acc_t(0);
  return make_component_from_log(omega, mu, sigma, floor, normalization, log_sigma);
}

// exp(a_k - (j - mu_k)^2 c_k): component k's unweighted term at key position j.
template <typename acc_t>
MMA_HOST_DEVICE acc_t component_term(const Component<acc_t>& c, acc_t position) {
  const acc_t d = position - c.mu;
  return exp_of(c.log_coeff - d * d * c.inv_2var);
}

// Largest log(omega_k) + a_k - (j - mu_k)^2 c_k over components with omega_k > 0 and real keys j < n_keys (the nearest
// key to mu_k maximises each component). Used as the strict-mode shift; 0 when no component has positive weight.
template <typename acc_t>
MMA_HOST_DEVICE acc_t strict_shift(const Component<acc_t>* comps, int64_t n_comps, int64_t n_keys) {
  acc_t best = negative_infinity<acc_t>();
  for (int64_t k = 0; k < n_comps; ++k) {
    if (!(comps[k].omega > acc_t(0))) continue;
    acc_t nearest = comps[k].mu < acc_t(0) ? acc_t(0) : comps[k].mu;
    nearest = nearest > acc_t(n_keys - 1) ? acc_t(n_keys - 1) : nearest;
    nearest = static_cast<acc_t>(static_cast<int64_t>(nearest + acc_t(0.5)));  // round half up, >= 0 here
    const acc_t d = nearest - comps[k].mu;
    const acc_t value = log_of(comps[k].omega) + comps[k].log_coeff - d * d * comps[k].inv_2var;
    best = value > best ? value : best;
  }
  return best == negative_infinity<acc_t>() ? acc_t(0) : best;
}

// Applies a row's shift to its components (strict mode only).
template <typename acc_t>
MMA_HOST_DEVICE void apply_shift(Component<acc_t>* comps, int64_t n_comps, acc_t shift) {
  for (int64_t k = 0; k < n_comps; ++k) comps[k].log_coeff -= shift;
}

// Gradients of one component from three sums over the row's keys, with w_j = dL/du_j, e_j = component_term at j and
// d_j = j - mu_k:  m0 = sum_j w_j e_j,  m1 = sum_j w_j e_j d_j,  m2 = sum_j w_j e_j d_j^2.
template <typename acc_t>
struct ComponentGrads {
  acc_t omega, mu, sigma;
};

template <typename acc_t>
MMA_HOST_DEVICE ComponentGrads<acc_t> component_grads(const Component<acc_t>& c, acc_t m0, acc_t m1, acc_t m2) {
  ComponentGrads<acc_t> g;
  const acc_t inv_var = acc_t(2) * c.inv_2var;
  g.omega = m0;
  g.mu = c.omega * inv_var * m1;  // d/d mu of -(j - mu)^2 / (2 sigma^2) = (j - mu) / sigma^2
  // d/d sigma of -(j - mu)^2 / (2 sigma^2) - log Z = (j - mu)^2 / sigma^3 - [density] / sigma
  g.sigma = c.sigma_live ? c.omega * (inv_var * m2 - (c.density ? m0 : acc_t(0))) / c.sigma : acc_t(0);
  return g;
}

// Localness-Gaussian logit bias -(j - center)^2 / (2 width^2) (Yang et al. 2018), added before the softmax.
// Its gradients from sums over keys of the logit gradient s_j (d_j = j - center): n1 = sum s_j d_j, n2 = sum s_j d_j^2.
template <typename acc_t>
struct LocalBiasRow {
  acc_t center;
  acc_t width;     // floored
  acc_t inv_2var;  // 1 / (2 width^2)
  bool width_live;
};

template <typename acc_t>
MMA_HOST_DEVICE LocalBiasRow<acc_t> make_local_bias(acc_t center, acc_t width, acc_t floor) {
  LocalBiasRow<acc_t> r;
  r.center = center;
  r.width = floored(width, floor);
  r.width_live = width >= floor;
  r.inv_2var = acc_t(0.5) / (r.width * r.width);
  return r;
}

template <typename acc_t>
MMA_HOST_DEVICE acc_t local_bias(const LocalBiasRow<acc_t>& r, acc_t position) {
  const acc_t d = position - r.center;
  return -d * d * r.inv_2var;
}

template <typename acc_t>
MMA_HOST_DEVICE acc_t local_center_grad(const LocalBiasRow<acc_t>& r, acc_t n1) {
  return acc_t(2) * r.inv_2var * n1;  // d/d center of -(j - c)^2 / (2 w^2) = (j - c) / w^2
}

template <typename acc_t>
MMA_HOST_DEVICE acc_t local_width_grad(const LocalBiasRow<acc_t>& r, acc_t n2) {
  return r.width_live ? acc_t(2) * r.inv_2var * n2 / r.width : acc_t(0);  // (j - c)^2 / w^3
}

}  // namespace mma_nmt::gmm
