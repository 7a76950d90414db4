// The backward kernel of mma_nmt::attention (attention_backward_kernel.cuh) on the current CUDA stream.
#include "attention/cuda/attention_backward_kernel.cuh"

#include "common/cuda_dispatch.h"
#include "common/cuda_launch.h"

namespace mma_nmt::attention::cuda {

std::tuple<at::Tensor, at::Tensor, at::Tensor> attention_backward(const AttentionParams& p, const at::Tensor& grad_out,
                                                                  const at::Tensor& q, const at::Tensor& k,
                                                                  const at::Tensor& v, const at::Tensor& out,
                                                                  const at::Tensor& lse,
                                                                  const std::optional<at::Tensor>& key_lengths) {
  // MMA_NMT_CUDA_KERNELS=rows: the warp-per-row kernels where the tiled ones would run (common/cuda_dispatch.h)
  const AttentionKernelSet kernels =
      row_warp_attention_kernels_only() ? AttentionKernelSet::kRowWarps : AttentionKernelSet::kAuto;
  return run_attention_backward(p, grad_out, q, k, v, out, lse, key_lengths, gpu::current_launch(), kernels);
}

}  // namespace mma_nmt::attention::cuda
