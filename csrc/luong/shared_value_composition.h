// mma_nmt::shared_value_attention by composition: batched GEMMs (cuBLAS on the GPU) around a masked softmax. The
// CUDA backend's choice (cuda/luong_cuda.cu; docs/cuda.md has the dispatch table): the forward in float32/float64, the
// backward in every dtype. Its hand-written kernels run one block per query row forward and one block per sentence
// backward, over all that sentence's heads and rows in turn, while at Luong's sizes (S ~ 50 keys, d ~ 1000) the work
// is small matrix products that cuBLAS does best. Compiled in every build; tests/cpp/test_shared_value_composition.cpp
// checks it on CPU tensors against the CPU kernel, and in bfloat16 against float64.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>
#include <tuple>

#include "luong/shared_value_params.h"

namespace mma_nmt::luong {

// (out, lse, probs or (0,)) as mma_nmt::shared_value_attention, for checked arguments.
std::tuple<at::Tensor, at::Tensor, at::Tensor> shared_value_forward_by_composition(
    const SharedValueParams& p, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const std::optional<at::Tensor>& key_lengths, bool return_probs);

// (grad_q, grad_k, grad_v) as mma_nmt::shared_value_attention_backward, from any forward's lse (out is not read),
// contiguous, in the inputs' dtype.
std::tuple<at::Tensor, at::Tensor, at::Tensor> shared_value_backward_by_composition(
    const SharedValueParams& p, const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k,
    const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse, const std::optional<at::Tensor>& key_lengths);

}  // namespace mma_nmt::luong
