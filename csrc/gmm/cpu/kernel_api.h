// The CPU GMM kernels are compiled once per instruction set (gmm_kernel.h, one generated source per build);
// gmm_cpu.cpp picks the best one the running processor supports (common/cpu_isa.h).
#pragma once

#include <ATen/core/Tensor.h>

#include "common/cpu_isa.h"
#include "gmm/gmm_params.h"

namespace mma_nmt::gmm::cpu {

// q, k, v, grad_out, out and the gradients of q, k and v are (batch, heads, len, dim) with any strides but a contiguous
// last dimension (head views of projections are read, and out and those gradients written, in place); the other
// tensors are contiguous. Optional inputs (key_lengths, local_center, local_width) are undefined when absent; alpha and
// beta are undefined unless weights were asked for.
struct ForwardTensors {
  at::Tensor q, k, v, key_lengths, omega, mu, sigma, gate, local_center, local_width;
  at::Tensor out, lse, log_mass, alpha_context, beta_context, alpha, beta;
};

struct BackwardTensors {
  at::Tensor grad_out, q, k, v, key_lengths, omega, mu, sigma, gate, local_center, local_width;
  at::Tensor lse, log_mass, alpha_context, beta_context;
  // Written whole by the kernel (uninitialised when it runs); grad_local_* are undefined without the localness bias.
  at::Tensor grad_q, grad_k, grad_v, grad_omega, grad_mu, grad_sigma, grad_gate, grad_local_center, grad_local_width;
};

MMA_NMT_DECLARE_FOR_EACH_ISA(
    void gmm_forward(const GmmParams& p, ForwardTensors& t);
    void gmm_backward(const GmmParams& p, BackwardTensors& t);)

}  // namespace mma_nmt::gmm::cpu
