// mma_nmt::multilayer_attention by composition: the per-layer projections arranged into mma_nmt::attention's
// (B, heads', L, dim) layout (multilayer_params.h's fused heads), the attention operator on them, and the results
// arranged back. It is the CUDA backend (cuda/multilayer_cuda.cpp, reusing the CUDA attention kernels); it is compiled
// on every build, so that the CPU tests (tests/cpp/test_multilayer_arrangement.cpp) check it against the CPU kernel.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>
#include <tuple>
#include <vector>

namespace mma_nmt::multilayer {

std::tuple<at::Tensor, at::Tensor, at::Tensor> multilayer_attention_by_arrangement(
    at::TensorList q, at::TensorList k, at::TensorList v, const std::optional<at::Tensor>& key_lengths,
    int64_t num_heads, double scale, bool layer_specific, bool return_probs);

std::tuple<std::vector<at::Tensor>, std::vector<at::Tensor>, std::vector<at::Tensor>>
multilayer_attention_backward_by_arrangement(const at::Tensor& grad_out, at::TensorList q, at::TensorList k,
                                             at::TensorList v, const at::Tensor& out, const at::Tensor& lse,
                                             const std::optional<at::Tensor>& probs,
                                             const std::optional<at::Tensor>& key_lengths, int64_t num_heads,
                                             double scale, bool layer_specific);

}  // namespace mma_nmt::multilayer
