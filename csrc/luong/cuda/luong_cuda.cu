// CUDA implementation of mma_nmt::shared_value_attention and its backward: argument checks and the device guard, then
// the forward kernel of shared_value_kernels.cuh in every dtype (its composition with MMA_NMT_CUDA_KERNELS=composition),
// and the backward by batched GEMMs (shared_value_composition.h) in every dtype; with MMA_NMT_CUDA_KERNELS=handwritten
// the kernels of shared_value_kernels.cuh on the current stream, both ways.
#include "luong/cuda/shared_value_kernels.cuh"  // first: it includes common/cuda_compat.h

#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "common/cuda_dispatch.h"
#include "common/cuda_launch.h"
#include "luong/shared_value_composition.h"

namespace mma_nmt::luong::cuda {
namespace {

std::tuple<at::Tensor, at::Tensor, at::Tensor> shared_value_attention_cuda(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const std::optional<at::Tensor>& key_lengths,
    double scale, bool return_probs) {
  const SharedValueParams p = check_shared_value_args("mma_nmt.shared_value_attention", q, k, v, key_lengths, scale);
  const c10::cuda::CUDAGuard guard(q.device());
  // The hand-written forward in every dtype (5.0x and 2.8x the formula in bfloat16 on the H200; float32 inferred,
  // common/cuda_dispatch.h): the Luong step has no long calls.
  if (composition_wanted(q.scalar_type(), /*long_call=*/false)) {
    return shared_value_forward_by_composition(p, q, k, v, key_lengths, return_probs);
  }
  return run_shared_value_forward(p, q, k, v, key_lengths, return_probs, gpu::current_launch());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> shared_value_attention_backward_cuda(
    const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& out,
    const at::Tensor& lse, const std::optional<at::Tensor>& key_lengths, double scale) {
  const char* op = "mma_nmt.shared_value_attention_backward";
  const SharedValueParams p = check_shared_value_args(op, q, k, v, key_lengths, scale);
  check_shared_value_backward_extras(op, p, q, grad_out, out, lse);
  const c10::cuda::CUDAGuard guard(q.device());
  // In every dtype: five GEMMs in the inputs' dtype beat the kernel of then, one block per sentence, 2.5-4x in bfloat16
  // on an H200 (benchmarks/results/2026-11-29.nmt-sizes.notes.md). Its two-pass successor is not measured yet.
  if (!handwritten_cuda_kernels_only()) {  // MMA_NMT_CUDA_KERNELS=composition: this, as by default
    return shared_value_backward_by_composition(p, grad_out, q, k, v, out, lse, key_lengths);
  }
  return run_shared_value_backward(p, grad_out, q, k, v, out, lse, key_lengths, gpu::current_launch());
}

}  // namespace

TORCH_LIBRARY_IMPL(mma_nmt, CUDA, m) {
  m.impl("shared_value_attention", &shared_value_attention_cuda);
  m.impl("shared_value_attention_backward", &shared_value_attention_backward_cuda);
}

}  // namespace mma_nmt::luong::cuda
