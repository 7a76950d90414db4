// mma_nmt::attention through FlashAttention-2 (issue 48, point 1) for a group of heads of one kind: the window
// arguments of the kind and the packing of a padded batch (flash_plan.h) around FA2's two calls, which are passed in
// (FlashKernels): torch's at::_flash_attention_forward / _backward on the GPU (cuda/attention_cuda.cpp), stand-ins
// with FA2's documented semantics on CPU tensors in tests/cpp/test_flash_calls.cpp, so that CI checks everything here
// but FA2 itself (which the H200 probe of 2026-11-28 checked: 14 cases, gradients included).
//
// Layouts: q, k, v (B, H, T or S, D) go to FA2 as (B, T, H, D) views (no copy where they are head views of the
// projections' output); padded batches as rows (B T, H, D), each sentence's real rows first (packing_index):
//   - kNone: no key padding, one FA2 sequence per sentence;
//   - kPackedKeys: global heads with key padding: every query row, the sentence's real keys;
//   - kPackedBoth: padded self-attention of any kind (T = S, no offset): the real queries and keys of each sentence;
//     the padding query rows come out 0 with lse -inf and pass no gradient, as SPEC's shared rules allow there.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <optional>
#include <tuple>

#include "attention/attention_params.h"
#include "attention/flash_plan.h"

namespace mma_nmt::attention {

using FlashTriple = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

// FA2's arguments that vary with the call. cu_q / cu_k: (B + 1,) int32 cumulative sequence lengths, or undefined for
// the batched (B, T, H, D) form; max_q / max_k: the longest sequence; left / right: window sizes (nullopt: unbounded).
struct FlashCall {
  at::Tensor cu_q, cu_k;
  int64_t max_q = 0, max_k = 0;
  bool is_causal = false;
  double scale = 1.0;
  std::optional<int64_t> left, right;
};

// FA2's calls: forward(q, k, v) -> (out like q, lse: (B, H, T) batched or (H, total rows) packed, float);
// backward(grad_out, q, k, v, out, lse) -> (grad_q, grad_k, grad_v) like q, k, v. Rows outside every sequence are
// left unwritten.
struct FlashKernels {
  std::function<std::tuple<at::Tensor, at::Tensor>(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                   const FlashCall& call)>
      forward;
  std::function<FlashTriple(const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const at::Tensor& out, const at::Tensor& lse, const FlashCall& call)>
      backward;
};

// The packing of one operator call's padded batch (packing_index, cumulative_lengths), which depends on the key
// lengths alone: the first packed group of the call computes it, the call's other head-kind groups reuse it (a mixed
// GLFB call packs its sentences once instead of four times, in each direction). One per call and never kept past it:
// a packing reused by a later call, or recorded in a CUDA graph and replayed, would pack stale lengths.
struct FlashPackingCache {
  at::Tensor index, cu_keys;  // the keys' packing_index and cumulative lengths
  at::Tensor cu_all_queries;  // (B + 1,): every query row, T per sentence (kPackedKeys)
};

// The packing through which FA2 computes this group exactly (flash_packing), or nullopt: a group of one kind with no
// dropout and equal q/k and v head sizes. The device-side limits (dtype, head size, architecture) are the caller's.
std::optional<FlashPacking> flash_group_packing(const AttentionParams& p, const std::optional<at::Tensor>& key_lengths);

// (out, lse, probs = (0,)) and (grad_q, grad_k, grad_v) of a group flash_group_packing takes, through `kernels`;
// `packing`: the call's FlashPackingCache, shared by its groups (or null: the group packs for itself).
FlashTriple flash_group_forward(const AttentionParams& p, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                const std::optional<at::Tensor>& key_lengths, const FlashKernels& kernels,
                                FlashPackingCache* packing = nullptr);
FlashTriple flash_group_backward(const AttentionParams& p, const at::Tensor& grad_out, const at::Tensor& q,
                                 const at::Tensor& k, const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse,
                                 const std::optional<at::Tensor>& key_lengths, const FlashKernels& kernels,
                                 FlashPackingCache* packing = nullptr);

}  // namespace mma_nmt::attention
