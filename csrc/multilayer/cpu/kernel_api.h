// The CPU multi-layer attention kernels are compiled once per instruction set (multilayer_kernel.h, one generated
// source per build); multilayer_cpu.cpp picks the best one the running processor supports (common/cpu_isa.h).
#pragma once

#include <ATen/core/Tensor.h>

#include "common/cpu_isa.h"
#include <vector>

#include "multilayer/multilayer_params.h"

namespace mma_nmt::multilayer::cpu {

// Every tensor contiguous: the projections q[i] (B, T, E), k[i] (B, S, E), v[j] (B, S, Ev); out (B, T, sets*Ev),
// lse (B, fused heads, T), probs (B, fused heads, T, S).
struct MultilayerForward {
  std::vector<at::Tensor> q, k, v;
  at::Tensor key_lengths;  // undefined without padding
  at::Tensor out, lse, probs;  // probs undefined unless asked for (then zero-initialised)
};

struct MultilayerBackward {
  std::vector<at::Tensor> q, k, v;
  at::Tensor key_lengths, grad_out, out, lse;
  at::Tensor probs;  // the forward's weights (B, fused heads, T, S), or undefined: then recomputed
  std::vector<at::Tensor> grad_q, grad_k, grad_v;  // uninitialised; the kernel writes every element
};

MMA_NMT_DECLARE_FOR_EACH_ISA(
    void multilayer_forward(const MultilayerParams& p, MultilayerForward& t);
    void multilayer_backward(const MultilayerParams& p, MultilayerBackward& t);)

}  // namespace mma_nmt::multilayer::cpu
