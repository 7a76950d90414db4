// CUDA implementation of mma_nmt::attention and mma_nmt::attention_backward: argument checks and the device guard, then
// the heads grouped by kind, PyTorch's fused SDPA kernels for every group but the local heads
// (attention_composition.h), and the hand-written kernels (attention_cuda.h) for those, for dropout and for weights;
// MMA_NMT_CUDA_KERNELS=handwritten forces the hand-written kernels everywhere (common/cuda_dispatch.h). Plain C++ (no
// device code), so only the two kernel files go through nvcc.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <limits>
#include <tuple>

#include "attention/attention_composition.h"
#include "attention/attention_outputs.h"  // stats_dtype
#include "attention/cuda/attention_cuda.h"
#include "common/cuda_dispatch.h"

namespace mma_nmt::attention::cuda {
namespace {

// Limits of the warp-per-row kernels, checked before any allocation. key_lengths need no range check here: the kernels
// clamp them (keys_of_sentence), as reading them on the host would synchronise with the device.
void check_cuda_limits(const char* op, const AttentionParams& p, const at::Tensor& q) {
  TORCH_CHECK_VALUE(q.is_cuda(), op, ": expected CUDA tensors, got q on ", q.device());
  TORCH_CHECK_VALUE(p.head_dim <= kMaxHeadDim && p.value_dim <= kMaxHeadDim, op, ": the CUDA kernels support head ",
                    "sizes up to ", kMaxHeadDim, " (one warp holds a row in registers), got head_dim=", p.head_dim,
                    " (q, k) and value_dim=", p.value_dim, " (v)");
  TORCH_CHECK_VALUE(p.heads <= kMaxHeads, op, ": the CUDA kernels support at most ", kMaxHeads, " heads, got ",
                    p.heads);
  TORCH_CHECK_VALUE(p.batch <= 65535, op, ": the CUDA kernels support a batch of at most 65535 (one grid z-index per ",
                    "sentence), got ", p.batch);
}

// The hand-written kernels, for the heads the SDPA composition leaves to them.
const AttentionKernels& handwritten_kernels() {
  static const AttentionKernels kernels{
      [](const AttentionParams& p, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
         const std::optional<at::Tensor>& key_lengths) {
        return attention_forward(p, q, k, v, key_lengths, /*return_probs=*/false);
      },
      [](const AttentionParams& p, const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k,
         const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse, const std::optional<at::Tensor>& key_lengths) {
        return attention_backward(p, grad_out, q, k, v, out, lse, key_lengths);
      }};
  return kernels;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> attention_cuda(const at::Tensor& q, const at::Tensor& k,
                                                              const at::Tensor& v,
                                                              const std::optional<at::Tensor>& key_lengths,
                                                              at::IntArrayRef head_kinds, int64_t window, double scale,
                                                              int64_t query_offset, double dropout_p, int64_t seed,
                                                              bool return_probs) {
  const char* op = "mma_nmt.attention";
  const AttentionParams p =
      check_attention_args(op, q, k, v, key_lengths, head_kinds, window, scale, query_offset, dropout_p, seed);
  check_cuda_limits(op, p, q);
  const c10::cuda::OptionalCUDAGuard guard(q.device());
  if (!handwritten_cuda_kernels_only() && splittable(p, return_probs)) {
    return attention_forward_by_kind(p, q, k, v, key_lengths, handwritten_kernels());
  }
  return attention_forward(p, q, k, v, key_lengths, return_probs);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> attention_backward_cuda(
    const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& out,
    const at::Tensor& lse, const std::optional<at::Tensor>& key_lengths, at::IntArrayRef head_kinds, int64_t window,
    double scale, int64_t query_offset, double dropout_p, int64_t seed) {
  const char* op = "mma_nmt.attention_backward";
  const AttentionParams p =
      check_attention_args(op, q, k, v, key_lengths, head_kinds, window, scale, query_offset, dropout_p, seed);
  check_backward_extras(op, p, q, grad_out, out, lse, stats_dtype(q.scalar_type()));
  check_cuda_limits(op, p, q);
  const c10::cuda::OptionalCUDAGuard guard(q.device());
  // Either backend's lse serves either backward (attention_composition.h), so the choice is made again here.
  if (!handwritten_cuda_kernels_only() && splittable(p, /*return_probs=*/false)) {
    return attention_backward_by_kind(p, grad_out, q, k, v, out, lse, key_lengths, handwritten_kernels());
  }
  return attention_backward(p, grad_out, q, k, v, out, lse, key_lengths);
}

}  // namespace

TORCH_LIBRARY_IMPL(mma_nmt, CUDA, m) {
  m.impl("attention", &attention_cuda);
  m.impl("attention_backward", &attention_backward_cuda);
}

}  // namespace mma_nmt::attention::cuda
