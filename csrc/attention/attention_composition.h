// mma_nmt::attention by composition: PyTorch's fused scaled-dot-product-attention kernels (flash, memory-efficient)
// for every head kind they serve well (global, causal, forward, backward; plain cross-attention), the fastest thing a
// GPU has for them. Mixed kinds are split into one group of heads per kind; the local heads, and whatever torch has no
// fused kernel for, go to a kernel that takes any kind (the hand-written CUDA kernel). It is the CUDA backend's first
// choice (cuda/attention_cuda.cpp; docs/cuda.md has the dispatch table). Compiled in every build: on CPU tensors it
// calls torch's CPU flash kernel with the same masks, lse handling and fully-masked-row rules, and
// tests/cpp/test_attention_composition.cpp checks it against the CPU kernel there.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <optional>
#include <tuple>

#include "attention/attention_params.h"

namespace mma_nmt::attention {

using AttentionTriple = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

// Whether SDPA computes this call whole: every head of one kind other than local, no dropout (SDPA's dropout draws its
// own mask; ours is a hash the backward redraws), no weights asked for and every size non-zero. Unequal q/k and v head
// sizes are zero-padded to the larger one (multi-layer attention's joint weights: n D against D).
bool composable(const AttentionParams& p, bool return_probs);

// Whether attention_forward_by_kind takes this call: as composable, but with any mix of kinds. A local head sees
// 2w + 1 keys, which the hand-written kernel visits alone, where SDPA would do T x S work; see docs/cuda.md.
bool splittable(const AttentionParams& p, bool return_probs);

// The kernels that take any head kinds and sizes, for the heads SDPA does not take: the hand-written CUDA kernels on
// the GPU, the CPU kernels in the tests. No weights are asked of them (splittable() excludes that).
struct AttentionKernels {
  std::function<AttentionTriple(const AttentionParams&, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                const std::optional<at::Tensor>& key_lengths)>
      forward;
  std::function<AttentionTriple(const AttentionParams&, const at::Tensor& grad_out, const at::Tensor& q,
                                const at::Tensor& k, const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse,
                                const std::optional<at::Tensor>& key_lengths)>
      backward;
};

// (out, lse, probs = (0,)) and (grad_q, grad_k, grad_v) with the heads grouped by kind: each group of global, causal,
// forward or backward heads through SDPA, local heads (and any group torch has no fused kernel for) through `kernels`,
// the results put back in head order by one cat per result (out and the gradients position-major, lse contiguous;
// the CUDA entry lays each gradient out like its input). Heads of one kind that sit next to each other are taken as
// views; others are gathered (O(T D) copies against O(T S D) of attention). Arguments checked and splittable.
AttentionTriple attention_forward_by_kind(const AttentionParams& p, const at::Tensor& q, const at::Tensor& k,
                                          const at::Tensor& v, const std::optional<at::Tensor>& key_lengths,
                                          const AttentionKernels& kernels);
AttentionTriple attention_backward_by_kind(const AttentionParams& p, const at::Tensor& grad_out, const at::Tensor& q,
                                           const at::Tensor& k, const at::Tensor& v, const at::Tensor& out,
                                           const at::Tensor& lse, const std::optional<at::Tensor>& key_lengths,
                                           const AttentionKernels& kernels);

// As attention_forward_by_kind and attention_backward_by_kind, but every group straight to `kernels` (which choose
// per group themselves, e.g. FlashAttention-2 for the groups it serves; attention_cuda.cpp), with no SDPA attempt.
AttentionTriple attention_forward_per_kind(const AttentionParams& p, const at::Tensor& q, const at::Tensor& k,
                                           const at::Tensor& v, const std::optional<at::Tensor>& key_lengths,
                                           const AttentionKernels& kernels);
AttentionTriple attention_backward_per_kind(const AttentionParams& p, const at::Tensor& grad_out, const at::Tensor& q,
                                            const at::Tensor& k, const at::Tensor& v, const at::Tensor& out,
                                            const at::Tensor& lse, const std::optional<at::Tensor>& key_lengths,
                                            const AttentionKernels& kernels);

// (out, lse, probs = (0,)) as mma_nmt::attention, or nullopt where torch has no fused kernel for these inputs (then
// the caller runs the hand-written kernel). Arguments checked and composable.
std::optional<AttentionTriple> attention_forward_by_sdpa(
    const AttentionParams& p, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const std::optional<at::Tensor>& key_lengths);

// (grad_q, grad_k, grad_v) as mma_nmt::attention_backward, from any forward's out and lse (both backends give the
// same lse: natural log-sum-exp of the scaled logits over the visible keys, -inf without any), or nullopt as above.
std::optional<AttentionTriple> attention_backward_by_sdpa(
    const AttentionParams& p, const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k,
    const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse, const std::optional<at::Tensor>& key_lengths);

}  // namespace mma_nmt::attention
