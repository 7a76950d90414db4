// CUDA implementation of mma_nmt::attention and mma_nmt::attention_backward: argument checks and the device guard, then
// FlashAttention-2 per head-kind group for long half-precision calls (flash_calls.h), the heads grouped by kind with
// PyTorch's fused SDPA kernels for every group but the local heads for long float32/float64 calls
// (attention_composition.h), and the hand-written kernels (attention_cuda.h) for the rest (NMT sizes in every dtype),
// for dropout and for weights; MMA_NMT_CUDA_KERNELS selects (common/cuda_dispatch.h). Plain C++ (no device code), so
// only the two kernel files go through nvcc.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <functional>
#include <tuple>

#include "attention/attention_composition.h"
#include "attention/attention_outputs.h"  // stats_dtype
#include "attention/flash_calls.h"
#include "attention/flash_plan.h"
#include "attention/head_mask.h"  // kNumHeadKinds
#include "attention/cuda/attention_cuda.h"
#include "common/cuda_dispatch.h"
#include "common/head_layout.h"

namespace mma_nmt::attention::cuda {
namespace {

// Limits of the warp-per-row kernels, checked before any allocation. key_lengths need no range check here: the kernels
// clamp them (keys_of_sentence), as reading them on the host would synchronise with the device.
void check_cuda_limits(const char* op, const AttentionParams& p, const at::Tensor& q) {
  TORCH_CHECK_VALUE(q.is_cuda(), op, ": expected CUDA tensors, got q on ", q.device());
  TORCH_CHECK_VALUE(p.head_dim <= kMaxHeadDim && p.value_dim <= kMaxHeadDim, op, ": the CUDA kernels support head ",
                    "sizes up to ", kMaxHeadDim, " (one warp holds a row in registers), got head_dim=", p.head_dim,
                    " (q, k) and value_dim=", p.value_dim, " (v)");
  TORCH_CHECK_VALUE(p.heads <= kMaxHeads, op, ": the CUDA kernels support at most ", kMaxHeads, " heads, got ",
                    p.heads);
  TORCH_CHECK_VALUE(p.batch <= 65535, op, ": the CUDA kernels support a batch of at most 65535 (one grid z-index per ",
                    "sentence), got ", p.batch);
}

// The hand-written kernels, for the heads the SDPA composition leaves to them.
const AttentionKernels& handwritten_kernels() {
  static const AttentionKernels kernels{
      [](const AttentionParams& p, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
         const std::optional<at::Tensor>& key_lengths) {
        return attention_forward(p, q, k, v, key_lengths, /*return_probs=*/false);
      },
      [](const AttentionParams& p, const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k,
         const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse, const std::optional<at::Tensor>& key_lengths) {
        return attention_backward(p, grad_out, q, k, v, out, lse, key_lengths);
      }};
  return kernels;
}

// Whether the call is past the sizes at which the hand-written kernels lead (flash_by_default, measured in half
// precision): flash takes it in float16/bfloat16, the composition in float32/float64 (common/cuda_dispatch.h).
bool long_call(const AttentionParams& p, bool padded) {
  const bool uniform = std::adjacent_find(p.head_kinds.begin(), p.head_kinds.end(), std::not_equal_to<>()) ==
                       p.head_kinds.end();
  return flash_by_default(p.batch * p.heads, p.query_len, p.key_len, padded, uniform);
}

// --- FlashAttention-2 (flash_calls.h): long calls by default, every size with MMA_NMT_CUDA_KERNELS=flash ----------
// Its probe (14 cases with gradients: every kind, T != S, offsets, padded cross-attention) passed on an H200 on
// 2026-11-28 (on packed batches: the in-place sequences of 2026-12-01 are not yet run on a GPU). A group of heads of one
// kind goes to FA2 where its window gives our rule (flash_group_sequences: unpadded with S - T = query_offset for a
// non-global kind, global heads with key padding, padded self-attention of any kind, its padding query rows left out
// too), in float16/bfloat16, without dropout or weights, with equal head sizes up to
// 256 in steps of 8, on sm80 or newer. Calls of mixed kinds are split into one group per kind, each through FA2 where
// it serves, else the hand-written kernel. flash_by_default (flash_plan.h) gives the size from which this is the
// default (`is_long`: long_call's answer for the call); MMA_NMT_CUDA_KERNELS=flash takes it at every size,
// =handwritten and =composition never.
bool flash_wanted(const AttentionParams& p, const at::Tensor& q, bool is_long, bool return_probs) {
  if (handwritten_cuda_kernels_only() || composition_cuda_kernels_opted_in() || return_probs || p.dropout_p > 0.0) {
    return false;
  }
  if (!flash_cuda_kernels_opted_in() && !is_long) return false;
  if (q.scalar_type() != at::kHalf && q.scalar_type() != at::kBFloat16) return false;
  if (p.head_dim != p.value_dim || p.head_dim > 256 || p.head_dim % 8 != 0) return false;
  return at::cuda::getCurrentDeviceProperties()->major >= 8;
}

// torch's FA2: the batched call without cumulative lengths, else the variable-length one; our kernel for the starts.
const FlashKernels& torch_flash_kernels() {
  static const FlashKernels kernels{
      [](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const FlashCall& c) {
        const auto cu = [](const at::Tensor& t) { return t.defined() ? std::optional<at::Tensor>(t) : std::nullopt; };
        const auto r = at::_flash_attention_forward(q, k, v, cu(c.cu_q), cu(c.cu_k), c.max_q, c.max_k, 0.0,
                                                    c.is_causal, false, c.scale, c.left, c.right);
        return std::make_tuple(std::get<0>(r), std::get<1>(r));
      },
      [](const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
         const at::Tensor& out, const at::Tensor& lse, const FlashCall& c) {
        // Philox seed and offset: FA2 reads them only with dropout, which this path never has (torch's own SDPA passes
        // uninitialised ones then), so no fill kernel for them either.
        const at::Tensor rng_state = at::empty({2}, q.options().dtype(at::kLong));
        const at::Tensor unused = at::empty({0}, q.options().dtype(at::kLong));
        const auto r = at::_flash_attention_backward(grad_out, q, k, v, out, lse, c.cu_q, c.cu_k, c.max_q, c.max_k,
                                                     0.0, c.is_causal, rng_state, unused, c.scale, c.left, c.right);
        return std::make_tuple(std::get<0>(r), std::get<1>(r), std::get<2>(r));
      },
      [](const at::Tensor& key_lengths, int64_t query_len, int64_t key_len) {  // one launch (flash_sequence_starts.cu)
        return flash_sequence_starts(key_lengths, query_len, key_len);
      }};
  return kernels;
}

// Each kind's group through FA2 where it takes the group, else through the hand-written kernel; the groups of one call
// share `sequences` (flash_calls.h: the padded batch's sequences computed once per call).
AttentionKernels flash_or_handwritten_kernels(FlashSequenceCache& sequences) {
  return {[&sequences](const AttentionParams& p, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                     const std::optional<at::Tensor>& key_lengths) {
            if (flash_group_sequences(p, key_lengths)) {
              return flash_group_forward(p, q, k, v, key_lengths, torch_flash_kernels(), &sequences);
            }
            return attention_forward(p, q, k, v, key_lengths, /*return_probs=*/false);
          },
          [&sequences](const AttentionParams& p, const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k,
                     const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse,
                     const std::optional<at::Tensor>& key_lengths) {
            if (flash_group_sequences(p, key_lengths)) {
              return flash_group_backward(p, grad_out, q, k, v, out, lse, key_lengths, torch_flash_kernels(), &sequences);
            }
            return attention_backward(p, grad_out, q, k, v, out, lse, key_lengths);
          }};
}

// Whether FA2 takes some group of this call: the call is split by kind (a uniform call is one group). `is_long`:
// long_call's answer, which the composition's choice reads too.
bool flash_takes(const AttentionParams& p, const at::Tensor& q, const std::optional<at::Tensor>& key_lengths,
                 bool is_long, bool return_probs) {
  if (!splittable(p, return_probs) || !flash_wanted(p, q, is_long, return_probs)) return false;
  bool asked[kNumHeadKinds] = {};
  AttentionParams group = p;  // one copy of the params, asked once per kind present
  group.heads = 1;
  for (const int64_t kind : p.head_kinds) {
    if (kind < 0 || kind >= kNumHeadKinds || asked[kind]) continue;
    asked[kind] = true;
    group.head_kinds.assign(1, kind);
    if (flash_group_sequences(group, key_lengths)) return true;
  }
  return false;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> attention_cuda(const at::Tensor& q, const at::Tensor& k,
                                                              const at::Tensor& v,
                                                              const std::optional<at::Tensor>& key_lengths,
                                                              at::IntArrayRef head_kinds, int64_t window, double scale,
                                                              int64_t query_offset, double dropout_p, int64_t seed,
                                                              bool return_probs, bool self_attention) {
  const char* op = "mma_nmt.attention";
  const AttentionParams p = check_attention_args(op, q, k, v, key_lengths, head_kinds, window, scale, query_offset,
                                                 dropout_p, seed, self_attention);
  check_cuda_limits(op, p, q);
  const c10::cuda::OptionalCUDAGuard guard(q.device());
  // Every path returns out position-major, as the CPU kernel and the fake kernel (common/head_layout.h). The
  // hand-written kernels allocate it so; FlashAttention's and the SDPA composition's results are laid out here (free
  // where they already are: FA2's own output, transposed).
  std::tuple<at::Tensor, at::Tensor, at::Tensor> result;
  const bool is_long = long_call(p, key_lengths.has_value());
  if (flash_takes(p, q, key_lengths, is_long, return_probs)) {
    FlashSequenceCache sequences;  // this call's alone
    result = flash_forward_per_kind(p, q, k, v, key_lengths, flash_or_handwritten_kernels(sequences));
  } else if (composition_wanted(q.scalar_type(), is_long) &&
             splittable(p, return_probs)) {
    result = attention_forward_by_kind(p, q, k, v, key_lengths, handwritten_kernels());
  } else {
    return attention_forward(p, q, k, v, key_lengths, return_probs);
  }
  std::get<0>(result) = as_position_major(std::get<0>(result));
  return result;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> attention_backward_cuda(
    const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& out,
    const at::Tensor& lse, const std::optional<at::Tensor>& key_lengths, at::IntArrayRef head_kinds, int64_t window,
    double scale, int64_t query_offset, double dropout_p, int64_t seed, bool self_attention) {
  const char* op = "mma_nmt.attention_backward";
  const AttentionParams p = check_attention_args(op, q, k, v, key_lengths, head_kinds, window, scale, query_offset,
                                                 dropout_p, seed, self_attention);
  check_backward_extras(op, p, q, grad_out, out, lse, stats_dtype(q.scalar_type()));
  check_cuda_limits(op, p, q);
  const c10::cuda::OptionalCUDAGuard guard(q.device());
  // Either backend's lse serves either backward (attention_composition.h), so the choice is made again here. Each
  // gradient is laid out like its input (gradient_like), as on the CPU: a head view of a projection gets a
  // position-major gradient, which the projection's backward takes without a copy. The hand-written kernels allocate
  // them so; FlashAttention's and the SDPA composition's are laid out here.
  std::tuple<at::Tensor, at::Tensor, at::Tensor> grads;
  const bool is_long = long_call(p, key_lengths.has_value());
  if (flash_takes(p, q, key_lengths, is_long, /*return_probs=*/false)) {
    FlashSequenceCache sequences;  // this call's alone
    grads =
        flash_backward_per_kind(p, grad_out, q, k, v, out, lse, key_lengths, flash_or_handwritten_kernels(sequences));
  } else if (composition_wanted(q.scalar_type(), is_long) &&
             splittable(p, /*return_probs=*/false)) {
    grads = attention_backward_by_kind(p, grad_out, q, k, v, out, lse, key_lengths, handwritten_kernels());
  } else {
    return attention_backward(p, grad_out, q, k, v, out, lse, key_lengths);
  }
  auto& [grad_q, grad_k, grad_v] = grads;
  grad_q = as_gradient_layout(grad_q, q);
  grad_k = as_gradient_layout(grad_k, k);
  grad_v = as_gradient_layout(grad_v, v);
  return grads;
}

}  // namespace

TORCH_LIBRARY_IMPL(mma_nmt, CUDA, m) {
  m.impl("attention", &attention_cuda);
  m.impl("attention_backward", &attention_backward_cuda);
}

}  // namespace mma_nmt::attention::cuda
