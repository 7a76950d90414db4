// mma_nmt::attention by composition: PyTorch's fused scaled-dot-product-attention kernels (flash, memory-efficient)
// where every head has the same kind, the fastest thing a GPU has for global and causal heads and plain
// cross-attention. It is the CUDA backend's first choice (cuda/attention_cuda.cpp; docs/cuda.md has the dispatch
// table). Compiled in every build: on CPU tensors it calls torch's CPU flash kernel with the same masks, lse handling
// and fully-masked-row rules, and tests/cpp/test_attention_composition.cpp checks it against the CPU kernel there.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>
#include <tuple>

#include "attention/attention_params.h"

namespace mma_nmt::attention {

// Whether the composition computes this call: every head of one kind other than local, no dropout (SDPA's dropout
// draws its own mask; ours is a hash the backward redraws), no weights asked for, q/k and v head sizes equal and every
// size non-zero. Mixed and local kinds stay with the hand-written kernel: see docs/cuda.md for why.
bool composable(const AttentionParams& p, bool return_probs);

// (out, lse, probs = (0,)) as mma_nmt::attention, or nullopt where torch has no fused kernel for these inputs (then
// the caller runs the hand-written kernel). Arguments checked and composable.
std::optional<std::tuple<at::Tensor, at::Tensor, at::Tensor>> attention_forward_by_sdpa(
    const AttentionParams& p, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const std::optional<at::Tensor>& key_lengths);

// (grad_q, grad_k, grad_v) as mma_nmt::attention_backward, from any forward's out and lse (both backends give the
// same lse: natural log-sum-exp of the scaled logits over the visible keys, -inf without any), or nullopt as above.
std::optional<std::tuple<at::Tensor, at::Tensor, at::Tensor>> attention_backward_by_sdpa(
    const AttentionParams& p, const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k,
    const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse, const std::optional<at::Tensor>& key_lengths);

}  // namespace mma_nmt::attention
