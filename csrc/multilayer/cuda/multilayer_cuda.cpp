// CUDA implementation of mma_nmt::multilayer_attention and its backward: the CUDA attention kernels on the arranged
// projections (multilayer_arrangement.h). Plain C++; the arrangement copies run as ATen ops on the device.
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "multilayer/multilayer_arrangement.h"

namespace mma_nmt::multilayer::cuda {
namespace {

std::tuple<at::Tensor, at::Tensor, at::Tensor> multilayer_attention_cuda(
    at::TensorList q, at::TensorList k, at::TensorList v, const std::optional<at::Tensor>& key_lengths,
    int64_t num_heads, double scale, bool layer_specific, bool return_probs) {
  TORCH_CHECK_VALUE(!q.empty(), "mma_nmt.multilayer_attention: q must hold one tensor per encoder layer, got none");
  const c10::cuda::OptionalCUDAGuard guard(q[0].device());
  return multilayer_attention_by_arrangement(q, k, v, key_lengths, num_heads, scale, layer_specific, return_probs);
}

std::tuple<std::vector<at::Tensor>, std::vector<at::Tensor>, std::vector<at::Tensor>>
multilayer_attention_backward_cuda(const at::Tensor& grad_out, at::TensorList q, at::TensorList k, at::TensorList v,
                                   const at::Tensor& out, const at::Tensor& lse, const std::optional<at::Tensor>& probs,
                                   const std::optional<at::Tensor>& key_lengths, int64_t num_heads, double scale,
                                   bool layer_specific) {
  const c10::cuda::OptionalCUDAGuard guard(grad_out.device());
  return multilayer_attention_backward_by_arrangement(grad_out, q, k, v, out, lse, probs, key_lengths, num_heads, scale,
                                                      layer_specific);
}

}  // namespace

TORCH_LIBRARY_IMPL(mma_nmt, CUDA, m) {
  m.impl("multilayer_attention", &multilayer_attention_cuda);
  m.impl("multilayer_attention_backward", &multilayer_attention_backward_cuda);
}

}  // namespace mma_nmt::multilayer::cuda
