// CPU implementation of mma_nmt::gmm_attention and mma_nmt::gmm_attention_backward: argument checks, output allocation,
// and the choice of the kernel build that matches the processor.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <limits>
#include <tuple>

#include "common/cpu_isa.h"
#include "common/head_layout.h"
#include "gmm/cpu/kernel_api.h"
#include "gmm/gmm_outputs.h"

namespace mma_nmt::gmm::cpu {
namespace {

GmmForwardResult gmm_attention_cpu(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                   const std::optional<at::Tensor>& key_lengths, const at::Tensor& omega,
                                   const at::Tensor& mu, const at::Tensor& sigma, const at::Tensor& gate,
                                   const std::optional<at::Tensor>& local_center,
                                   const std::optional<at::Tensor>& local_width, double scale, int64_t normalization,
                                   double sigma_floor, bool return_weights) {
  const char* op = "mma_nmt.gmm_attention";
  const GmmParams p = check_gmm_args(op, q, k, v, key_lengths, omega, mu, sigma, gate, {local_center, local_width},
                                     scale, normalization, sigma_floor);
  check_cpu_floating(op, q);
  ForwardOutputs o = allocate_forward_outputs(p, q, return_weights);
  // A zero head or value dim still has weights, lse and log_mass: only no query row or no key leaves nothing to do.
  if (p.batch * p.heads * p.query_len == 0 || p.key_len == 0) return empty_forward(o);
  ForwardTensors t{rows_contiguous(q), rows_contiguous(k), rows_contiguous(v), contiguous_or_undefined(key_lengths),
                   omega.contiguous(), mu.contiguous(), sigma.contiguous(), gate.contiguous(),
                   contiguous_or_undefined(local_center), contiguous_or_undefined(local_width),
                   o.out, o.lse, o.log_mass, o.alpha_context, o.beta_context,
                   return_weights ? o.alpha : at::Tensor(), return_weights ? o.beta : at::Tensor()};
  MMA_NMT_CPU_DISPATCH(gmm_forward, p, t);
  return o.as_tuple();
}

GmmBackwardResult gmm_attention_backward_cpu(
    const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const std::optional<at::Tensor>& key_lengths, const at::Tensor& omega, const at::Tensor& mu,
    const at::Tensor& sigma, const at::Tensor& gate, const std::optional<at::Tensor>& local_center,
    const std::optional<at::Tensor>& local_width, const at::Tensor& lse, const at::Tensor& log_mass,
    const at::Tensor& alpha_context, const at::Tensor& beta_context, double scale, int64_t normalization,
    double sigma_floor) {
  const char* op = "mma_nmt.gmm_attention_backward";
  const GmmParams p = check_gmm_args(op, q, k, v, key_lengths, omega, mu, sigma, gate, {local_center, local_width},
                                     scale, normalization, sigma_floor);
  check_cpu_floating(op, q);
  check_gmm_backward_extras(op, p, q, grad_out, lse, log_mass, alpha_context, beta_context);
  // With head dim 0 the dot-product weights are uniform, and v, the mixture and the gate still get gradients.
  const bool run = p.batch * p.heads * p.query_len > 0 && p.key_len > 0;
  // The kernel zeroes the padding keys' rows itself. The mixture has q's dtype here: the CPU takes no half precision.
  BackwardGrads g = allocate_backward_grads(p, q, k, v, omega.scalar_type(), run);
  BackwardTensors t{rows_contiguous(grad_out), rows_contiguous(q), rows_contiguous(k), rows_contiguous(v),
                    contiguous_or_undefined(key_lengths), omega.contiguous(), mu.contiguous(), sigma.contiguous(),
                    gate.contiguous(), contiguous_or_undefined(local_center), contiguous_or_undefined(local_width),
                    lse.contiguous(), log_mass.contiguous(), alpha_context.contiguous(), beta_context.contiguous(),
                    g.q, g.k, g.v, g.omega, g.mu, g.sigma, g.gate,
                    p.has_local_bias ? g.local_center : at::Tensor(), p.has_local_bias ? g.local_width : at::Tensor()};
  if (run) {
    MMA_NMT_CPU_DISPATCH(gmm_backward, p, t);
  }
  return g.as_tuple();
}

}  // namespace

TORCH_LIBRARY_IMPL(mma_nmt, CPU, m) {
  m.impl("gmm_attention", &gmm_attention_cpu);
  m.impl("gmm_attention_backward", &gmm_attention_backward_cpu);
}

}  // namespace mma_nmt::gmm::cpu
