// The CPU attention kernels are compiled once per instruction set (attention_kernel.h, one generated source per
// build); attention_cpu.cpp picks the best one the running processor supports.
#pragma once

#include <ATen/core/Tensor.h>

#include "common/cpu_isa.h"
#include "attention/attention_params.h"

namespace mma_nmt::attention::cpu {

// Tensors are (batch, heads, len, dim) with any strides but a contiguous last dimension (head views of projections are
// read, and out and the gradients written, in place); lse, probs and key_lengths are contiguous. `probs` is undefined
// unless weights were asked for.
struct ForwardTensors {
  at::Tensor q, k, v, key_lengths;  // key_lengths undefined without padding
  at::Tensor out, lse, probs;
};

struct BackwardTensors {
  at::Tensor grad_out, q, k, v, out, lse, key_lengths;
  at::Tensor grad_q, grad_k, grad_v;  // written whole by the kernel (uninitialised when it runs)
};

MMA_NMT_DECLARE_FOR_EACH_ISA(
    void attention_forward(const AttentionParams& p, ForwardTensors& t);
    void attention_backward(const AttentionParams& p, BackwardTensors& t);)

}  // namespace mma_nmt::attention::cpu
