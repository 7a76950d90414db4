#include "attention/flash_calls.h"

#include <ATen/ATen.h>

#include <limits>

#include "attention/attention_outputs.h"  // stats_dtype
#include "attention/head_mask.h"

namespace mma_nmt::attention {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// The kind's window as FA2 takes it: is_causal for B and C (FA2 anchors it bottom-right, as its windows), window sizes
// for L and F, neither for G.
FlashCall kind_call(const AttentionParams& p) {
  FlashCall call;
  call.scale = p.scale;
  call.max_q = p.query_len;
  call.max_k = p.key_len;
  const int64_t kind = p.head_kinds[0];
  if (kind == kBackward || kind == kCausal) {
    call.is_causal = true;
  } else if (kind != kGlobal) {
    const FlashWindow w = flash_window(kind, p.window);
    call.left = w.left;
    call.right = w.right;
  }
  return call;
}

at::Tensor as_bthd(const at::Tensor& x) {  // (B, H, T, D) -> (B, T, H, D), a view where the last dimension is dense
  const at::Tensor t = x.transpose(1, 2);
  return t.stride(-1) == 1 ? t : t.contiguous();
}

at::Tensor as_rows(const at::Tensor& x) {  // (B, H, L, D) -> (B L, H, D): a view of position-major heads
  return as_bthd(x).reshape({x.size(0) * x.size(2), x.size(1), x.size(3)});
}

at::Tensor from_rows(const at::Tensor& rows, int64_t batch, int64_t len) {  // (B L, H, D) -> (B, H, L, D), a view
  return rows.view({batch, len, rows.size(1), rows.size(2)}).transpose(1, 2);
}

// A padded group's call: the kind's window over its sentences' sequences. `cache` (the call's, or null): the sequences
// computed by an earlier group of the same call, filled in here where they are not.
FlashCall in_place_call(const AttentionParams& p, FlashSequences sequences, const at::Tensor& key_lengths,
                        FlashSequenceCache& cache) {
  if (!cache.real.defined()) cache.real = real_rows(key_lengths, p.key_len);
  if (!cache.cu_keys.defined()) {
    cache.cu_keys = sequence_starts(cache.real, p.batch, p.key_len, /*rest_second=*/false, key_lengths.options());
  }
  FlashCall call = kind_call(p);
  call.cu_k = cache.cu_keys;
  at::Tensor& cu_q = sequences == FlashSequences::kRealQueriesAndKeys ? cache.cu_real_queries : cache.cu_all_queries;
  if (!cu_q.defined()) {
    // kRealQueriesAndKeys: T = S, the real queries are the real keys' positions; kRealKeys: every query row is real
    const at::Tensor real = sequences == FlashSequences::kRealQueriesAndKeys ? cache.real : at::Tensor();
    cu_q = sequence_starts(real, p.batch, p.query_len, /*rest_second=*/true, key_lengths.options());
  }
  call.cu_q = cu_q;
  return call;
}

// The rows FA2 gives no key (output 0, lse +inf): (B, 1, T) padding queries of kRealQueriesAndKeys, an empty
// sentence's included; (B, 1, 1) empty sentences of kRealKeys.
const at::Tensor& rows_without_keys(const AttentionParams& p, FlashSequences sequences, FlashSequenceCache& cache) {
  if (sequences == FlashSequences::kRealQueriesAndKeys) {
    if (!cache.padding_queries.defined()) {
      const at::Tensor position = at::arange(p.query_len, cache.real.options()).view({1, p.query_len});  // (1, T)
      cache.padding_queries = (position >= cache.real).view({p.batch, 1, p.query_len});
    }
    return cache.padding_queries;
  }
  if (!cache.empty_sentences.defined()) cache.empty_sentences = cache.real.eq(0).view({p.batch, 1, 1});
  return cache.empty_sentences;
}

// FA2's variable-length lse (H, B T), rows in place -> ours (B, H, T), contiguous in `dtype`: -inf for the rows
// without keys (FA2 writes +inf).
at::Tensor lse_from_rows(const at::Tensor& lse, const AttentionParams& p, const at::Tensor& without_keys,
                         at::ScalarType dtype) {
  TORCH_CHECK(lse.dim() == 2 && lse.size(0) == p.heads && lse.size(1) == p.batch * p.query_len,
              "mma_nmt.attention: FlashAttention-2's variable-length lse has shape ", lse.sizes(),
              ", expected (heads, batch * query_len); set MMA_NMT_CUDA_KERNELS=handwritten");
  const at::Tensor ours = lse.view({p.heads, p.batch, p.query_len}).permute({1, 0, 2});  // (B, H, T)
  return ours.to(dtype, /*non_blocking=*/false, /*copy=*/false, at::MemoryFormat::Contiguous)
      .masked_fill_(without_keys, -kInf);
}

}  // namespace

std::optional<FlashSequences> flash_group_sequences(const AttentionParams& p,
                                                    const std::optional<at::Tensor>& key_lengths) {
  if (p.head_kinds.empty() || p.dropout_p > 0.0 || p.head_dim != p.value_dim) return std::nullopt;
  if (p.batch == 0 || p.heads == 0 || p.query_len == 0 || p.key_len == 0 || p.head_dim == 0) return std::nullopt;
  const int64_t kind = p.head_kinds[0];
  for (const int64_t other : p.head_kinds) {
    if (other != kind) return std::nullopt;
  }
  return flash_sequences(kind, p.query_len, p.key_len, p.query_offset, key_lengths.has_value(),
                         p.self_attention);
}

FlashTriple flash_group_forward(const AttentionParams& p, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                const std::optional<at::Tensor>& key_lengths, const FlashKernels& kernels,
                                FlashSequenceCache* cache) {
  const auto sequences = flash_group_sequences(p, key_lengths);
  TORCH_CHECK(sequences.has_value(), "mma_nmt.attention: FlashAttention-2 cannot compute this call exactly");
  const at::ScalarType stats = stats_dtype(q.scalar_type());
  if (*sequences == FlashSequences::kBatched) {
    const auto [out, lse] = kernels.forward(as_bthd(q), as_bthd(k), as_bthd(v), kind_call(p));  // (B, T, H, D), (B, H, T)
    return {out.transpose(1, 2), lse.to(stats).contiguous(), at::empty({0}, q.options())};  // out position-major
  }
  FlashSequenceCache own;
  FlashSequenceCache& shared = cache != nullptr ? *cache : own;
  const FlashCall call = in_place_call(p, *sequences, *key_lengths, shared);
  const auto [out, lse] = kernels.forward(as_rows(q), as_rows(k), as_rows(v), call);  // (B T, H, D), (H, B T)
  return {from_rows(out, p.batch, p.query_len), lse_from_rows(lse, p, rows_without_keys(p, *sequences, shared), stats),
          at::empty({0}, q.options())};
}

FlashTriple flash_group_backward(const AttentionParams& p, const at::Tensor& grad_out, const at::Tensor& q,
                                 const at::Tensor& k, const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse,
                                 const std::optional<at::Tensor>& key_lengths, const FlashKernels& kernels,
                                 FlashSequenceCache* cache) {
  const auto sequences = flash_group_sequences(p, key_lengths);
  TORCH_CHECK(sequences.has_value(), "mma_nmt.attention_backward: FlashAttention-2 cannot compute this call exactly");
  if (*sequences == FlashSequences::kBatched) {
    const auto [grad_q, grad_k, grad_v] = kernels.backward(as_bthd(grad_out), as_bthd(q), as_bthd(k), as_bthd(v),
                                                           as_bthd(out), lse.contiguous(), kind_call(p));
    return {grad_q.transpose(1, 2), grad_k.transpose(1, 2), grad_v.transpose(1, 2)};  // (B, T, H, D) -> (B, H, T, D)
  }
  FlashSequenceCache own;
  const FlashCall call = in_place_call(p, *sequences, *key_lengths, cache != nullptr ? *cache : own);
  // Ours (B, H, T) -> FA2's (H, B T). Its rows without keys hold -inf, which FA2 never reads: a sequence without keys
  // has no key block to visit.
  const at::Tensor lse_rows = lse.permute({1, 0, 2}).reshape({p.heads, p.batch * p.query_len}).contiguous();
  const auto [grad_q, grad_k, grad_v] = kernels.backward(as_rows(grad_out), as_rows(q), as_rows(k), as_rows(v),
                                                         as_rows(out), lse_rows, call);
  return {from_rows(grad_q, p.batch, p.query_len), from_rows(grad_k, p.batch, p.key_len),
          from_rows(grad_v, p.batch, p.key_len)};
}

}  // namespace mma_nmt::attention
