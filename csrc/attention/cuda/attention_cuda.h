// The CUDA attention kernels as seen from the host: attention_cuda.cpp checks arguments, allocates outputs and calls
// these launchers (attention_cuda_forward.cu, attention_cuda_backward.cu) on q's device and current stream.
#pragma once

#include <ATen/core/Tensor.h>

#include "attention/attention_params.h"

namespace mma_nmt::attention::cuda {

// Tensors are contiguous (batch, heads, len, dim) on one CUDA device. `key_lengths` is undefined without padding and
// `probs` unless weights were asked for (then zero-filled by the caller; only visible keys are written).
struct ForwardTensors {
  at::Tensor q, k, v, key_lengths;
  at::Tensor out, lse, probs;
};

// grad_q is zero-filled by the caller. grad_k_acc / grad_v_acc are zero-filled accumulators in the accumulation type
// (float for float/half/bfloat16 inputs, double for double), added to atomically by every query row.
struct BackwardTensors {
  at::Tensor grad_out, q, k, v, out, lse, key_lengths;
  at::Tensor grad_q, grad_k_acc, grad_v_acc;
};

// Largest q/k and v head size; one warp holds a query row in registers, 256 / 32 = 8 values per lane.
constexpr int64_t kMaxHeadDim = 256;
// Heads whose kinds travel inside the kernel parameters (no host-to-device copy, safe under CUDA graph capture).
constexpr int64_t kMaxHeads = 1024;

void attention_forward(const AttentionParams& p, const ForwardTensors& t);
void attention_backward(const AttentionParams& p, const BackwardTensors& t);

}  // namespace mma_nmt::attention::cuda
