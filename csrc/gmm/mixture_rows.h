// The mixture half of GMM attention by composition (gmm_composition.cpp), one query row at a time: beta over the
// row's keys and, in backward, the components' gradients from the dot products x_j = dO . v_j. Lanes split the keys
// (key j on lane j % lanes.count) and `lanes.sum` adds a value over them: the CUDA kernels run one row per warp
// (cuda/mixture_kernels.cuh), the CPU one row per thread (cpu/mixture_passes_cpu.cpp). Each direction is one pass over
// the keys plus one per component in backward, where ATen ops took an elementwise pass over (B, H, T, S) per component
// and step. The arithmetic is gmm_math.h's, as in the attention kernels.
#pragma once

#include "common/host_device.h"
#include "common/key_lengths.h"
#include "gmm/gmm_math.h"

namespace mma_nmt::gmm {

// One thread is the row's only lane (the CPU).
struct SerialLanes {
  int lane = 0;
  int count = 1;
  template <typename acc_t>
  MMA_HOST_DEVICE acc_t sum(acc_t x) const {
    return x;
  }
};

// One query row's mixture: its K components (contiguous, acc_t), its sentence's real keys and the call's options.
template <typename acc_t>
struct MixtureRow {
  const acc_t *omega, *mu, *sigma;
  int64_t components, normalization, key_len, n_keys;
  acc_t floor;
};

// The rows of one call: omega, mu and sigma (B, H, T, K) contiguous in acc_t, key lengths (B,) or null.
template <typename acc_t>
struct MixtureCall {
  const acc_t *omega, *mu, *sigma;
  const int64_t* lengths;
  int64_t rows, heads, query_len, key_len, components, normalization;
  acc_t floor;

  MMA_HOST_DEVICE MixtureRow<acc_t> row(int64_t r) const {
    const int64_t first = r * components;
    return {omega + first, mu + first,    sigma + first,
            components,    normalization, key_len,
            keys_of_sentence(lengths, r / (heads * query_len), key_len), floor};
  }
};

// Builds the row's components into `comps` (K of them) with the strict-mode shift applied; returns the shift: 0 outside
// strict mode and in a sentence without keys.
template <typename acc_t>
MMA_HOST_DEVICE acc_t build_components(const MixtureRow<acc_t>& r, Component<acc_t>* comps) {
  for (int64_t k = 0; k < r.components; ++k) {
    comps[k] = make_component<acc_t>(r.omega[k], r.mu[k], r.sigma[k], r.floor, r.normalization);
  }
  const acc_t shift = r.normalization == kStrict && r.n_keys > 0 ? strict_shift(comps, r.components, r.n_keys)
                                                                 : acc_t(0);
  apply_shift(comps, r.components, shift);
  return shift;
}

// u_j = sum_k omega_k e_k(j): the row's (shifted) mixture at key position j.
template <typename acc_t>
MMA_HOST_DEVICE acc_t mixture_at(const Component<acc_t>* comps, int64_t n_comps, acc_t position) {
  acc_t total = 0;
  for (int64_t k = 0; k < n_comps; ++k) total += comps[k].omega * component_term(comps[k], position);
  return total;
}

// The factor turning u into beta: 1 / U in strict mode (0 without mass, a NaN mass included), else 1.
template <typename acc_t>
MMA_HOST_DEVICE acc_t beta_scale(int64_t normalization, acc_t mass) {
  if (normalization != kStrict) return acc_t(1);
  return mass > acc_t(0) ? acc_t(1) / mass : acc_t(0);
}

// Writes u_j (the row's mixture, 0 past its sentence) into beta[0, key_len) and returns the row's mass U = sum_j u_j
// (every lane holds it); with `x` also the dot sum_j u_j x_j into *dot.
template <typename acc_t, typename Lanes>
MMA_HOST_DEVICE acc_t write_mixture(const MixtureRow<acc_t>& r, const Component<acc_t>* comps, const Lanes& lanes,
                                    acc_t* beta, const acc_t* x, acc_t* dot) {
  acc_t mass = 0, x_dot = 0;
  for (int64_t j = lanes.lane; j < r.key_len; j += lanes.count) {
    const acc_t u = j < r.n_keys ? mixture_at(comps, r.components, acc_t(j)) : acc_t(0);
    beta[j] = u;
    mass += u;
    if (x != nullptr && j < r.n_keys) x_dot += u * x[j];
  }
  if (x != nullptr) *dot = lanes.sum(x_dot);
  return lanes.sum(mass);
}

// beta_j = u_j * scale over the lane's real keys (each lane rescales what it wrote).
template <typename acc_t, typename Lanes>
MMA_HOST_DEVICE void scale_mixture(const MixtureRow<acc_t>& r, const Lanes& lanes, acc_t scale, acc_t* beta) {
  if (scale == acc_t(1)) return;
  for (int64_t j = lanes.lane; j < r.n_keys; j += lanes.count) beta[j] *= scale;
}

// Forward: beta (key_len values, 0 past the sentence) and the row's log mass, log sum_j of the unshifted mixture
// (shift + log U; -inf without mass). `comps` holds K components of scratch.
template <typename acc_t, typename Lanes>
MMA_HOST_DEVICE acc_t mixture_row_forward(const MixtureRow<acc_t>& r, Component<acc_t>* comps, const Lanes& lanes,
                                          acc_t* beta) {
  const acc_t shift = build_components(r, comps);
  const acc_t mass = write_mixture<acc_t>(r, comps, lanes, beta, nullptr, nullptr);
  scale_mixture(r, lanes, beta_scale(r.normalization, mass), beta);
  return mass > acc_t(0) ? shift + log_of(mass) : negative_infinity<acc_t>();
}

// The row's gradients of omega, mu and sigma, K values each.
template <typename acc_t>
struct MixtureRowGrads {
  acc_t *omega, *mu, *sigma;

  // The gradients of row `r` where these point at row 0's, K values a row.
  MMA_HOST_DEVICE MixtureRowGrads row(int64_t r, int64_t components) const {
    return {omega + r * components, mu + r * components, sigma + r * components};
  }
};

// Backward from x_j = dO . v_j (key_len values, only the sentence's read) and the row's gate g: writes beta as forward
// does (for the caller's grad_v = beta^T (g dO)) and, by lane 0, the components' gradients (gmm_math.h's
// component_grads of dL/du_j = g (x_j - [strict] dO . B) scale). Returns dO . B = sum_j beta_j x_j, for the gate's
// gradient. `comps` as in forward.
template <typename acc_t, typename Lanes>
MMA_HOST_DEVICE acc_t mixture_row_backward(const MixtureRow<acc_t>& r, Component<acc_t>* comps, const Lanes& lanes,
                                           const acc_t* x, acc_t gate, acc_t* beta, MixtureRowGrads<acc_t> grads) {
  build_components(r, comps);
  acc_t dot = 0;
  const acc_t mass = write_mixture(r, comps, lanes, beta, x, &dot);
  const acc_t scale = beta_scale(r.normalization, mass);
  scale_mixture(r, lanes, scale, beta);
  const acc_t delta_b = dot * scale;
  const bool strict = r.normalization == kStrict;
  const acc_t weight = gate * scale;
  for (int64_t k = 0; k < r.components; ++k) {
    // m0 = sum_j w_j e_j, m1 = sum_j w_j e_j d_j, m2 = sum_j w_j e_j d_j^2 with w = dL/du and d_j = j - mu_k
    acc_t m0 = 0, m1 = 0, m2 = 0;
    for (int64_t j = lanes.lane; j < r.n_keys; j += lanes.count) {
      const acc_t w = (strict ? x[j] - delta_b : x[j]) * weight;
      const acc_t d = acc_t(j) - comps[k].mu;
      const acc_t we = w * component_term(comps[k], acc_t(j));
      const acc_t wed = we * d;
      m0 += we;
      m1 += wed;
      m2 += wed * d;
    }
    m0 = lanes.sum(m0);
    m1 = lanes.sum(m1);
    m2 = lanes.sum(m2);
    if (lanes.lane == 0) {
      const ComponentGrads<acc_t> g = component_grads(comps[k], m0, m1, m2);
      grads.omega[k] = g.omega;
      grads.mu[k] = g.mu;
      grads.sigma[k] = g.sigma;
    }
  }
  return delta_b;
}

}  // namespace mma_nmt::gmm
