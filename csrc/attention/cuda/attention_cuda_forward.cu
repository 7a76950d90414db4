// The forward kernel of mma_nmt::attention (attention_forward_kernel.cuh) on the current CUDA stream.
#include "attention/cuda/attention_forward_kernel.cuh"

#include "common/cuda_dispatch.h"
#include "common/cuda_launch.h"

namespace mma_nmt::attention::cuda {

std::tuple<at::Tensor, at::Tensor, at::Tensor> attention_forward(const AttentionParams& p, const at::Tensor& q,
                                                                 const at::Tensor& k, const at::Tensor& v,
                                                                 const std::optional<at::Tensor>& key_lengths,
                                                                 bool return_probs) {
  // MMA_NMT_CUDA_KERNELS=rows: the warp-per-row kernels where the tiled ones would run (common/cuda_dispatch.h)
  const AttentionKernelSet kernels =
      row_warp_attention_kernels_only() ? AttentionKernelSet::kRowWarps : AttentionKernelSet::kAuto;
  return run_attention_forward(p, q, k, v, key_lengths, return_probs, gpu::current_launch(), kernels);
}

}  // namespace mma_nmt::attention::cuda
