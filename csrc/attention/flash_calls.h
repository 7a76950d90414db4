// mma_nmt::attention through FlashAttention-2 (issue 48, point 1) for a group of heads of one kind: the window
// arguments of the kind and the sequences of a padded batch (flash_plan.h) around FA2's two calls, which are passed in
// (FlashKernels): torch's at::_flash_attention_forward / _backward on the GPU (cuda/attention_cuda.cpp), stand-ins
// with FA2's documented semantics on CPU tensors in tests/cpp/test_flash_calls.cpp, so that CI checks everything here
// but FA2 itself (which the H200 probe of 2026-11-28 checked: 14 cases, gradients included, on packed batches).
//
// Layouts: q, k, v (B, H, T or S, D) go to FA2 as (B, T, H, D) views (no copy where they are head views of the
// projections' output); padded batches as their rows (B T, H, D), in place, each sentence three variable-length
// sequences (flash_sequence_starts.h):
//   - kBatched: no key padding, one FA2 sequence per sentence;
//   - kRealKeys: global heads with padding: every query row against the sentence's real keys;
//   - kRealQueriesAndKeys: padded self-attention of any kind (the caller's self_attention: T = S, no offset): the
//     real queries against the real keys; the padding query rows come out 0 with lse -inf and pass no gradient, as
//     SPEC's shared rules allow there.
// FA2 writes every row of every tensor it returns (a row without keys: output 0; a key without queries: gradient 0),
// so nothing is zero-filled, packed or unpacked: out, lse and the gradients come back as views of FA2's results but for
// the lse's rows without keys (-inf, where FA2 writes +inf: one kernel per call, which also lays the lse out as ours:
// flash_forward_per_kind). Until 2026-12-01 the real rows were packed first (index_copy) and unpacked after
// (index_select, masked_fill), which cost the padded flash path most of its launches; until 2026-12-02 a dozen small
// ops built the sequence starts.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <optional>
#include <tuple>

#include "attention/attention_composition.h"  // AttentionKernels, AttentionTriple
#include "attention/attention_params.h"
#include "attention/flash_plan.h"

namespace mma_nmt::attention {

// FA2's arguments that vary with the call. cu_q / cu_k: (sequences + 1,) int32 cumulative sequence starts over the
// rows, or undefined for the batched (B, T, H, D) form; max_q / max_k: at least the longest sequence; left / right:
// window sizes (nullopt: unbounded).
struct FlashCall {
  at::Tensor cu_q, cu_k;
  int64_t max_q = 0, max_k = 0;
  bool is_causal = false;
  double scale = 1.0;
  std::optional<int64_t> left, right;
};

// FA2's calls: forward(q, k, v) -> (out like q, lse: (B, H, T) batched or (H, total rows) variable-length, float);
// backward(grad_out, q, k, v, out, lse) -> (grad_q, grad_k, grad_v) like q, k, v. Rows outside every sequence are
// left unwritten. starts(key_lengths, T, S) -> the (3, 3 B + 1) int32 sequence starts of a padded batch
// (flash_sequence_starts.h), on the lengths' device: one kernel on the GPU (cuda/flash_sequence_starts_kernel.cuh),
// flash_sequence_starts_on_host on CPU tensors.
struct FlashKernels {
  std::function<std::tuple<at::Tensor, at::Tensor>(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                   const FlashCall& call)>
      forward;
  std::function<AttentionTriple(const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k,
                                const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse,
                                const FlashCall& call)>
      backward;
  std::function<at::Tensor(const at::Tensor& key_lengths, int64_t query_len, int64_t key_len)> starts;
};

// The sequence starts of one operator call's padded batch, which depend on the key lengths alone: the first group of
// the call that needs them computes them, the call's other head-kind groups reuse them. One per call and never kept
// past it: starts reused by a later call, or recorded in a CUDA graph and replayed, would describe stale lengths.
struct FlashSequenceCache {
  at::Tensor starts;  // (3, 3 B + 1) int32: rows kKeyStarts, kEveryQueryStarts, kRealQueryStarts
};

// The table of flash_sequence_starts.h for CPU key lengths, by the same arithmetic as the CUDA kernel (FA2's stand-ins
// in tests/cpp/test_flash_calls.cpp use it). Recorded as one op, mma_nmt::flash_sequence_starts, as the GPU launches
// one kernel.
at::Tensor flash_sequence_starts_on_host(const at::Tensor& key_lengths, int64_t query_len, int64_t key_len);

// The sequences through which FA2 computes this group exactly (flash_sequences), or nullopt: a group of one kind with
// no dropout and equal q/k and v head sizes. The device-side limits (dtype, head size, architecture) are the caller's.
std::optional<FlashSequences> flash_group_sequences(const AttentionParams& p,
                                                    const std::optional<at::Tensor>& key_lengths);

// (out, lse, probs = (0,)) and (grad_q, grad_k, grad_v) of a group flash_group_sequences takes, through `kernels`;
// `cache`: the call's FlashSequenceCache, shared by its groups (or null: the group computes its own). The forward's
// lse is FA2's, as flash_forward_per_kind takes it: (B, H, T) in the stats dtype, any strides, +inf in the rows
// without keys.
AttentionTriple flash_group_forward(const AttentionParams& p, const at::Tensor& q, const at::Tensor& k,
                                    const at::Tensor& v, const std::optional<at::Tensor>& key_lengths,
                                    const FlashKernels& kernels, FlashSequenceCache* cache = nullptr);
AttentionTriple flash_group_backward(const AttentionParams& p, const at::Tensor& grad_out, const at::Tensor& q,
                                     const at::Tensor& k, const at::Tensor& v, const at::Tensor& out,
                                     const at::Tensor& lse, const std::optional<at::Tensor>& key_lengths,
                                     const FlashKernels& kernels, FlashSequenceCache* cache = nullptr);

// attention_forward_per_kind with `kernels` (flash_group_forward for the groups FA2 takes, the hand-written kernel, or
// the CPU kernel in tests, for the others), then the call's lse as ours, contiguous with -inf in the rows without keys:
// one kernel for the whole call (a nan_to_num) where FA2 may have written +inf, none elsewhere.
AttentionTriple flash_forward_per_kind(const AttentionParams& p, const at::Tensor& q, const at::Tensor& k,
                                       const at::Tensor& v, const std::optional<at::Tensor>& key_lengths,
                                       const AttentionKernels& kernels);

// attention_backward_per_kind with `kernels`, the call's lse laid out once as FA2's variable-length call reads it
// ((H, B T) rows, a strided (B, H, T) view over them) where the call is padded, so that no group copies its own.
AttentionTriple flash_backward_per_kind(const AttentionParams& p, const at::Tensor& grad_out, const at::Tensor& q,
                                        const at::Tensor& k, const at::Tensor& v, const at::Tensor& out,
                                        const at::Tensor& lse, const std::optional<at::Tensor>& key_lengths,
                                        const AttentionKernels& kernels);

}  // namespace mma_nmt::attention
