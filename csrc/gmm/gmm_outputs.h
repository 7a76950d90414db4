// Output and gradient allocation shared by the CPU and CUDA implementations (mirrored by the fake kernels in Python).
#pragma once

#include <ATen/ATen.h>

#include <limits>
#include <tuple>
#include <vector>

#include "common/head_layout.h"
#include "gmm/gmm_params.h"

namespace mma_nmt::gmm {

using GmmForwardResult = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;
using GmmBackwardResult = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor,
                                     at::Tensor, at::Tensor>;

struct ForwardOutputs {
  at::Tensor out;            // (B, H, T, Dv), q's dtype, position-major (common/head_layout.h)
  at::Tensor lse;            // (B, H, T), stats dtype: log-sum-exp of the logits (with the local bias)
  at::Tensor log_mass;       // (B, H, T), stats dtype: log sum_{j<J} of the unnormalised mixture
  at::Tensor alpha_context;  // (B, H, T, Dv), stats dtype: alpha v
  at::Tensor beta_context;   // (B, H, T, Dv), stats dtype: beta v
  at::Tensor alpha, beta;    // (B, H, T, S) in q's dtype when asked for, else (0,)

  GmmForwardResult as_tuple() const { return {out, lse, log_mass, alpha_context, beta_context, alpha, beta}; }
};

inline ForwardOutputs allocate_forward_outputs(const GmmParams& p, const at::Tensor& q, bool return_weights) {
  const auto stats = q.options().dtype(stats_dtype(q.scalar_type()));
  ForwardOutputs o;
  o.out = position_major(p.batch, p.heads, p.query_len, p.value_dim, q.options());
  o.lse = at::empty({p.batch, p.heads, p.query_len}, stats);
  o.log_mass = at::empty({p.batch, p.heads, p.query_len}, stats);
  o.alpha_context = at::empty({p.batch, p.heads, p.query_len, p.value_dim}, stats);
  o.beta_context = at::empty({p.batch, p.heads, p.query_len, p.value_dim}, stats);
  if (return_weights) {  // zero-filled: the kernels leave the padding keys' weights 0
    o.alpha = at::zeros({p.batch, p.heads, p.query_len, p.key_len}, q.options());
    o.beta = at::zeros({p.batch, p.heads, p.query_len, p.key_len}, q.options());
  } else {  // (0,) placeholders
    o.alpha = at::empty({0}, q.options());
    o.beta = at::empty({0}, q.options());
  }
  return o;
}

// Result of a call without keys or without queries: zero output and contexts, -inf statistics.
inline GmmForwardResult empty_forward(ForwardOutputs& o) {
  o.out.zero_();
  o.alpha_context.zero_();
  o.beta_context.zero_();
  o.lse.fill_(-std::numeric_limits<double>::infinity());
  o.log_mass.fill_(-std::numeric_limits<double>::infinity());
  return o.as_tuple();
}

struct BackwardGrads {
  at::Tensor q, k, v, omega, mu, sigma, gate, local_center, local_width;

  GmmBackwardResult as_tuple() const { return {q, k, v, omega, mu, sigma, gate, local_center, local_width}; }
};

// grad_q, grad_k and grad_v are laid out like their inputs (gradient_like: a head view of a projection gets a
// position-major gradient), the others contiguous, in the mixture's dtype (`mixture`: omega's, q's or float32 beside
// half-precision q; gmm_checks.cpp). Uninitialised when `written` (the kernels write every element, the padding keys'
// zero gradients included), zero when not (an empty call). Local-bias gradients are (B, H, T) with the bias, else
// (0,).
inline BackwardGrads allocate_backward_grads(const GmmParams& p, const at::Tensor& q, const at::Tensor& k,
                                             const at::Tensor& v, at::ScalarType mixture, bool written) {
  const auto options = q.options().dtype(mixture);
  const auto alloc = [&](std::vector<int64_t> shape) {
    return written ? at::empty(shape, options) : at::zeros(shape, options);
  };
  const auto like = [&](const at::Tensor& input) {
    at::Tensor grad = gradient_like(input);
    return written ? grad : grad.zero_();
  };
  const int64_t B = p.batch, H = p.heads, T = p.query_len;
  BackwardGrads g;
  g.q = like(q);
  g.k = like(k);
  g.v = like(v);
  g.omega = alloc({B, H, T, p.components});
  g.mu = alloc({B, H, T, p.components});
  g.sigma = alloc({B, H, T, p.components});
  g.gate = alloc({B, H, T});
  g.local_center = p.has_local_bias ? alloc({B, H, T}) : at::empty({0}, options);
  g.local_width = p.has_local_bias ? alloc({B, H, T}) : at::empty({0}, options);
  return g;
}

}  // namespace mma_nmt::gmm
