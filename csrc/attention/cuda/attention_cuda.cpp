// CUDA implementation of mma_nmt::attention and mma_nmt::attention_backward: argument checks and the device guard, then
// the heads grouped by kind, PyTorch's fused SDPA kernels for every group but the local heads
// (attention_composition.h), and the hand-written kernels (attention_cuda.h) for those, for dropout and for weights;
// MMA_NMT_CUDA_KERNELS=handwritten forces the hand-written kernels everywhere (common/cuda_dispatch.h). Plain C++ (no
// device code), so only the two kernel files go through nvcc.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <limits>
#include <tuple>

#include "attention/attention_composition.h"
#include "attention/attention_outputs.h"  // stats_dtype
#include "attention/flash_plan.h"
#include "attention/cuda/attention_cuda.h"
#include "common/cuda_dispatch.h"
#include "common/key_padding.h"

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

// --- FlashAttention-2: long calls by default, every size with MMA_NMT_CUDA_KERNELS=flash (its probe, 14 cases with
// gradients, passed on an H200 on 2026-11-28) ----------------------------------------------------------------------
// One call of torch's FlashAttention-2 for a call whose heads are all of one kind, without key padding, where FA2's
// bottom-right anchored window gives our rule (flash_packing: S - T = query_offset for a non-global kind;
// tests/cpp/test_flash_plan.cpp). float16/bfloat16, no dropout, no weights, equal head sizes up to 256 in steps of 8,
// sm80 or newer. q, k, v (B, H, T, D) go to FA2 as (B, T, H, D) views: no copy where they are views of the
// projections' (B, T, H, D) output, which the modules hand over. Global heads with key padding (cross-attention) are
// one variable-length call: every sentence's T queries, its real keys packed first (flash_plan.h's packing_index, no
// host read). Padded self-attention of other kinds (queries packed too) and mixed kinds stay on the default path.
// flash_by_default (flash_plan.h) gives the size from which flash is the default; MMA_NMT_CUDA_KERNELS=flash takes
// it at every size, =handwritten never.
bool flash_wanted(const AttentionParams& p) {
  if (handwritten_cuda_kernels_only()) return false;
  return flash_cuda_kernels_opted_in() || flash_by_default(p.query_len, p.key_len);
}

bool flash_takes(const AttentionParams& p, const at::Tensor& q, const std::optional<at::Tensor>& key_lengths,
                 bool return_probs) {
  if (!flash_wanted(p) || return_probs || p.dropout_p > 0.0) return false;
  if (q.scalar_type() != at::kHalf && q.scalar_type() != at::kBFloat16) return false;
  if (p.head_dim != p.value_dim || p.head_dim > 256 || p.head_dim % 8 != 0) return false;
  if (p.batch == 0 || p.heads == 0 || p.query_len == 0 || p.key_len == 0) return false;
  const int64_t kind = p.head_kinds[0];
  for (const int64_t other : p.head_kinds) {
    if (other != kind) return false;
  }
  const auto packing = flash_packing(kind, p.query_len, p.key_len, p.query_offset, key_lengths.has_value());
  if (!packing.has_value() || *packing == FlashPacking::kPackedBoth) return false;  // packed queries: not yet
  return at::cuda::getCurrentDeviceProperties()->major >= 8;
}

// FA2's arguments for the kind: is_causal for B and C (FA2 anchors it bottom-right, as its windows), windows for L
// and F, neither for G.
struct FlashArguments {
  bool is_causal = false;
  std::optional<int64_t> left, right;
};

FlashArguments flash_arguments(const AttentionParams& p) {
  const int64_t kind = p.head_kinds[0];
  if (kind == kBackward || kind == kCausal) return {true, std::nullopt, std::nullopt};
  if (kind == kGlobal) return {};
  const FlashWindow w = flash_window(kind, p.window);
  return {false, w.left, w.right};
}

at::Tensor as_bthd(const at::Tensor& x) {  // (B, H, T, D) -> (B, T, H, D), a view where the last dimension is dense
  const at::Tensor t = x.transpose(1, 2);
  return t.stride(-1) == 1 ? t : t.contiguous();
}

// --- global heads with key padding: one variable-length call ---
// FA2's variable-length lse is (H, total queries); ours (B, H, T). Its rows without keys (an empty sentence) hold
// +inf, ours -inf. Any other layout is refused, loudly, rather than read wrongly.
at::Tensor lse_from_varlen(const at::Tensor& lse, const AttentionParams& p, const at::Tensor& key_lengths,
                           at::ScalarType dtype) {
  TORCH_CHECK(lse.dim() == 2 && lse.size(0) == p.heads && lse.size(1) == p.batch * p.query_len,
              "mma_nmt.attention (MMA_NMT_CUDA_KERNELS=flash): FlashAttention-2's variable-length lse has shape ",
              lse.sizes(), ", expected (heads, batch * query_len); unset MMA_NMT_CUDA_KERNELS");
  const at::Tensor empty = key_lengths.le(0).view({p.batch, 1, 1});                                  // (B, 1, 1)
  const at::Tensor ours = lse.view({p.heads, p.batch, p.query_len}).permute({1, 0, 2});              // (B, H, T)
  return ours.masked_fill(empty, -std::numeric_limits<double>::infinity()).to(dtype).contiguous();
}

at::Tensor lse_to_varlen(const at::Tensor& lse, const AttentionParams& p) {  // (B, H, T) -> (H, B T), -inf -> +inf
  const at::Tensor flash = lse.to(at::kFloat).permute({1, 0, 2}).reshape({p.heads, p.batch * p.query_len});
  return flash.masked_fill(at::isneginf(flash), std::numeric_limits<double>::infinity()).contiguous();
}

struct PackedKeys {
  at::Tensor index;  // (B S,) packing_index: row (b, j) -> its packed row
  at::Tensor cu_q;   // (B + 1,) int32: b T
  at::Tensor cu_k;   // (B + 1,) int32: cumulative real keys
};

PackedKeys packed_keys(const AttentionParams& p, const at::Tensor& key_lengths) {
  const auto cu = key_lengths.options().dtype(at::kInt);
  return {packing_index(key_lengths, p.key_len), at::arange(0, (p.batch + 1) * p.query_len, p.query_len, cu),
          cumulative_lengths(key_lengths, p.key_len)};
}

at::Tensor pack_rows(const at::Tensor& x, const at::Tensor& index) {  // (B, H, S, D) -> (B S, H, D), real keys first
  const at::Tensor rows = as_bthd(x).reshape({x.size(0) * x.size(2), x.size(1), x.size(3)});
  return at::empty_like(rows).index_copy_(0, index, rows);
}

at::Tensor unpack_grad(const at::Tensor& packed, const at::Tensor& index, const at::Tensor& key_lengths,
                       const AttentionParams& p) {  // (B S, H, D) -> (B, H, S, D), 0 at padding keys
  const int64_t dim = packed.size(2);
  const at::Tensor rows = packed.index_select(0, index).view({p.batch, p.key_len, p.heads, dim}).transpose(1, 2);
  return rows.masked_fill(keys_past_sentence(key_lengths, p.key_len).view({p.batch, 1, p.key_len, 1}), 0.0)
      .contiguous();
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> flash_forward_packed_keys(const AttentionParams& p, const at::Tensor& q,
                                                                         const at::Tensor& k, const at::Tensor& v,
                                                                         const at::Tensor& key_lengths) {
  const PackedKeys packed = packed_keys(p, key_lengths);
  const at::Tensor q_rows = as_bthd(q).reshape({p.batch * p.query_len, p.heads, p.head_dim});  // (B T, H, D)
  const auto r = at::_flash_attention_forward(q_rows, pack_rows(k, packed.index), pack_rows(v, packed.index),
                                              packed.cu_q, packed.cu_k, p.query_len, p.key_len, 0.0, false, false,
                                              p.scale);
  const at::Tensor out = std::get<0>(r).view({p.batch, p.query_len, p.heads, p.value_dim}).transpose(1, 2).contiguous();
  return {out, lse_from_varlen(std::get<1>(r), p, key_lengths, stats_dtype(q.scalar_type())),
          at::empty({0}, q.options())};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> flash_backward_packed_keys(
    const AttentionParams& p, const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k,
    const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse, const at::Tensor& key_lengths) {
  const PackedKeys packed = packed_keys(p, key_lengths);
  const auto rows = [&](const at::Tensor& x) {  // (B, H, T, D) -> (B T, H, D)
    return as_bthd(x).reshape({p.batch * p.query_len, p.heads, x.size(3)});
  };
  const at::Tensor rng_state = at::zeros({2}, q.options().dtype(at::kLong));  // no dropout: not read
  const at::Tensor unused = at::empty({0}, q.options().dtype(at::kLong));
  const auto r = at::_flash_attention_backward(rows(grad_out), rows(q), pack_rows(k, packed.index),
                                               pack_rows(v, packed.index), rows(out), lse_to_varlen(lse, p),
                                               packed.cu_q, packed.cu_k, p.query_len, p.key_len, 0.0, false,
                                               rng_state, unused, p.scale);
  const at::Tensor grad_q =
      std::get<0>(r).view({p.batch, p.query_len, p.heads, p.head_dim}).transpose(1, 2).contiguous();
  return {grad_q, unpack_grad(std::get<1>(r), packed.index, key_lengths, p),
          unpack_grad(std::get<2>(r), packed.index, key_lengths, p)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> flash_forward(const AttentionParams& p, const at::Tensor& q,
                                                             const at::Tensor& k, const at::Tensor& v) {
  const FlashArguments a = flash_arguments(p);
  const auto r = at::_flash_attention_forward(as_bthd(q), as_bthd(k), as_bthd(v), std::nullopt, std::nullopt,
                                              p.query_len, p.key_len, 0.0, a.is_causal, false, p.scale, a.left,
                                              a.right);
  // out (B, T, H, D) -> (B, H, T, D) contiguous, as the fake kernel reports it; lse (B, H, T) float
  const at::Tensor out = std::get<0>(r).transpose(1, 2).contiguous();
  const at::Tensor lse = std::get<1>(r).to(stats_dtype(q.scalar_type()));
  return {out, lse, at::empty({0}, q.options())};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> flash_backward(const AttentionParams& p, const at::Tensor& grad_out,
                                                              const at::Tensor& q, const at::Tensor& k,
                                                              const at::Tensor& v, const at::Tensor& out,
                                                              const at::Tensor& lse) {
  const FlashArguments a = flash_arguments(p);
  // no dropout: the generator state is not read, but the call takes one
  const at::Tensor rng_state = at::zeros({2}, q.options().dtype(at::kLong));
  const at::Tensor unused = at::empty({0}, q.options().dtype(at::kLong));
  const auto r = at::_flash_attention_backward(as_bthd(grad_out), as_bthd(q), as_bthd(k), as_bthd(v), as_bthd(out),
                                               lse.to(at::kFloat).contiguous(), at::Tensor(), at::Tensor(),
                                               p.query_len, p.key_len, 0.0, a.is_causal, rng_state, unused, p.scale,
                                               a.left, a.right);
  return {std::get<0>(r).transpose(1, 2).contiguous(), std::get<1>(r).transpose(1, 2).contiguous(),
          std::get<2>(r).transpose(1, 2).contiguous()};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> attention_cuda(const at::Tensor& q, const at::Tensor& k,
                                                              const at::Tensor& v,
                                                              const std::optional<at::Tensor>& key_lengths,
                                                              at::IntArrayRef head_kinds, int64_t window, double scale,
                                                              int64_t query_offset, double dropout_p, int64_t seed,
                                                              bool return_probs) {
  const char* op = "mma_nmt.attention";
  const AttentionParams p =
      check_attention_args(op, q, k, v, key_lengths, head_kinds, window, scale, query_offset, dropout_p, seed);
  check_cuda_limits(op, p, q);
  const c10::cuda::OptionalCUDAGuard guard(q.device());
  if (flash_takes(p, q, key_lengths, return_probs)) {
    return key_lengths.has_value() ? flash_forward_packed_keys(p, q, k, v, *key_lengths) : flash_forward(p, q, k, v);
  }
  if (!handwritten_cuda_kernels_only() && composition_by_default(q.scalar_type()) && splittable(p, return_probs)) {
    return attention_forward_by_kind(p, q, k, v, key_lengths, handwritten_kernels());
  }
  return attention_forward(p, q, k, v, key_lengths, return_probs);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> attention_backward_cuda(
    const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& out,
    const at::Tensor& lse, const std::optional<at::Tensor>& key_lengths, at::IntArrayRef head_kinds, int64_t window,
    double scale, int64_t query_offset, double dropout_p, int64_t seed) {
  const char* op = "mma_nmt.attention_backward";
  const AttentionParams p =
      check_attention_args(op, q, k, v, key_lengths, head_kinds, window, scale, query_offset, dropout_p, seed);
  check_backward_extras(op, p, q, grad_out, out, lse, stats_dtype(q.scalar_type()));
  check_cuda_limits(op, p, q);
  const c10::cuda::OptionalCUDAGuard guard(q.device());
  // Either backend's lse serves either backward (attention_composition.h), so the choice is made again here.
  if (flash_takes(p, q, key_lengths, /*return_probs=*/false)) {
    return key_lengths.has_value() ? flash_backward_packed_keys(p, grad_out, q, k, v, out, lse, *key_lengths)
                                   : flash_backward(p, grad_out, q, k, v, out, lse);
  }
  if (!handwritten_cuda_kernels_only() && composition_by_default(q.scalar_type()) &&
      splittable(p, /*return_probs=*/false)) {
    return attention_backward_by_kind(p, grad_out, q, k, v, out, lse, key_lengths, handwritten_kernels());
  }
  return attention_backward(p, grad_out, q, k, v, out, lse, key_lengths);
}

}  // namespace

TORCH_LIBRARY_IMPL(mma_nmt, CUDA, m) {
  m.impl("attention", &attention_cuda);
  m.impl("attention_backward", &attention_backward_cuda);
}

}  // namespace mma_nmt::attention::cuda
