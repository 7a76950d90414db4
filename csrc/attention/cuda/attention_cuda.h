// The CUDA attention kernels as seen from the host: attention_cuda.cpp checks arguments and calls these entry points
// (attention_cuda_forward.cu, attention_cuda_backward.cu) on q's device and current stream. They run the device source
// of attention_forward_kernel.cuh and attention_backward_kernel.cuh, which tests/cpp/emulated also runs on the CPU.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>
#include <tuple>

#include "attention/attention_params.h"

namespace mma_nmt::attention::cuda {

// What the kernels read and write (run_attention_forward / run_attention_backward build them): (batch, heads, len,
// dim) tensors on the kernels' device (CPU tensors under the emulator) with any strides but a contiguous last
// dimension (common/head_rows.h): the inputs as they come (head views of projections), `out` position-major, each
// gradient laid out like its input (common/head_layout.h); lse and probs contiguous. `key_lengths` is undefined
// without padding and `probs` unless weights were asked for (then zero-filled; only visible keys are written).
struct ForwardTensors {
  at::Tensor q, k, v, key_lengths;
  at::Tensor out, lse, probs;
};

// For the warp-per-row kernel grad_q is uninitialised (the kernel writes every row, 0 for a row without keys) and
// grad_k_acc / grad_v_acc are zero-filled accumulators in the accumulation type (float for float/half/bfloat16
// inputs, double for double), added to atomically by every query row. For the tiled kernels all three are
// uninitialised tensors of the input dtype that they write once.
struct BackwardTensors {
  at::Tensor grad_out, q, k, v, out, lse, key_lengths;
  at::Tensor grad_q, grad_k_acc, grad_v_acc;
};

// Largest q/k and v head size; one warp holds a query row in registers, 256 / 32 = 8 values per lane.
constexpr int64_t kMaxHeadDim = 256;
// Heads whose kinds travel inside the kernel parameters (no host-to-device copy, safe under CUDA graph capture).
constexpr int64_t kMaxHeads = 1024;

// (out, lse, probs) and (grad_q, grad_k, grad_v) of the operators, for checked arguments within the limits above.
std::tuple<at::Tensor, at::Tensor, at::Tensor> attention_forward(const AttentionParams& p, const at::Tensor& q,
                                                                 const at::Tensor& k, const at::Tensor& v,
                                                                 const std::optional<at::Tensor>& key_lengths,
                                                                 bool return_probs);
std::tuple<at::Tensor, at::Tensor, at::Tensor> attention_backward(const AttentionParams& p, const at::Tensor& grad_out,
                                                                  const at::Tensor& q, const at::Tensor& k,
                                                                  const at::Tensor& v, const at::Tensor& out,
                                                                  const at::Tensor& lse,
                                                                  const std::optional<at::Tensor>& key_lengths);

// FA2's (3, 3 B + 1) int32 sequence starts of a padded batch (attention/flash_sequence_starts.h) in one launch.
at::Tensor flash_sequence_starts(const at::Tensor& key_lengths, int64_t query_len, int64_t key_len);

}  // namespace mma_nmt::attention::cuda
