#include "attention/flash_calls.h"

#include <ATen/ATen.h>

#include <limits>

#include "attention/attention_outputs.h"  // stats_dtype
#include "attention/head_mask.h"
#include "common/key_padding.h"

namespace mma_nmt::attention {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// The kind's window as FA2 takes it: is_causal for B and C (FA2 anchors it bottom-right, as its windows), window sizes
// for L and F, neither for G.
FlashCall kind_call(const AttentionParams& p) {
  FlashCall call;
  call.scale = p.scale;
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

at::Tensor as_rows(const at::Tensor& x) {  // (B, H, L, D) -> (B L, H, D)
  return as_bthd(x).reshape({x.size(0) * x.size(2), x.size(1), x.size(3)});
}

at::Tensor pack(const at::Tensor& x, const at::Tensor& index) {  // (B, H, L, D) -> (B L, H, D), real rows first
  const at::Tensor rows = as_rows(x);
  return at::empty_like(rows).index_copy_(0, index, rows);
}

// (B L, H, D) rows in `index`'s order -> (B, H, L, D) position-major (common/head_layout.h: the layout the operator
// returns), 0 at the rows past each sentence's length when `zero_padding`.
at::Tensor unpack(const at::Tensor& rows, const at::Tensor& index, int64_t batch, int64_t len,
                  const at::Tensor& key_lengths, bool zero_padding) {
  const at::Tensor ordered = index.defined() ? rows.index_select(0, index) : rows;
  const at::Tensor x = ordered.view({batch, len, rows.size(1), rows.size(2)}).transpose(1, 2);  // (B, H, L, D)
  if (!zero_padding) return x;
  return x.masked_fill(keys_past_sentence(key_lengths, len).view({batch, 1, len, 1}), 0.0);  // keeps x's strides
}

// Where the packed calls take their rows: the permutation and the cumulative lengths of queries and keys.
struct Packed {
  at::Tensor index_q, index_k;  // (B T,), (B S,): packing_index, or undefined where the rows stay in place
  FlashCall call;
};

// `cache` (the call's, or null): the packing computed by an earlier group of the same call, filled in here if not.
Packed packed_call(const AttentionParams& p, FlashPacking packing, const at::Tensor& key_lengths,
                   FlashPackingCache* cache) {
  FlashPackingCache own;
  FlashPackingCache& shared = cache != nullptr ? *cache : own;
  if (!shared.index.defined()) {
    shared.index = packing_index(key_lengths, p.key_len);
    shared.cu_keys = cumulative_lengths(key_lengths, p.key_len);
  }
  Packed packed;
  packed.call = kind_call(p);
  packed.call.max_q = p.query_len;
  packed.call.max_k = p.key_len;
  packed.index_k = shared.index;
  packed.call.cu_k = shared.cu_keys;
  if (packing == FlashPacking::kPackedBoth) {  // T = S: the queries are the keys' positions
    packed.index_q = packed.index_k;
    packed.call.cu_q = packed.call.cu_k;
  } else {  // every query row: sequences of T queries
    if (!shared.cu_all_queries.defined()) {
      shared.cu_all_queries =
          at::arange(0, (p.batch + 1) * p.query_len, p.query_len, key_lengths.options().dtype(at::kInt));
    }
    packed.call.cu_q = shared.cu_all_queries;
  }
  return packed;
}

// Packed lse (H, B T), rows in index_q's order -> ours (B, H, T): -inf for the rows of a sentence without keys (FA2
// leaves +inf there) and, with packed queries, for the padding query rows (left unwritten).
at::Tensor lse_from_packed(const at::Tensor& lse, const AttentionParams& p, const Packed& packed,
                           const at::Tensor& key_lengths, at::ScalarType dtype) {
  TORCH_CHECK(lse.dim() == 2 && lse.size(0) == p.heads && lse.size(1) == p.batch * p.query_len,
              "mma_nmt.attention: FlashAttention-2's variable-length lse has shape ", lse.sizes(),
              ", expected (heads, batch * query_len); set MMA_NMT_CUDA_KERNELS=handwritten");
  const at::Tensor ordered = packed.index_q.defined() ? lse.index_select(1, packed.index_q) : lse;  // (H, B T)
  const at::Tensor ours = ordered.view({p.heads, p.batch, p.query_len}).permute({1, 0, 2});          // (B, H, T)
  at::Tensor no_keys = key_lengths.le(0).view({p.batch, 1, 1});                                     // (B, 1, 1)
  if (packed.index_q.defined()) {
    no_keys = no_keys | keys_past_sentence(key_lengths, p.query_len).view({p.batch, 1, p.query_len});  // (B, 1, T)
  }
  return ours.masked_fill(no_keys, -kInf).to(dtype).contiguous();
}

// Ours (B, H, T) -> FA2's packed (H, B T) in index_q's order, -inf -> +inf (FA2's "no key" value). Half-precision
// calls keep their lse in float, the dtype FA2 takes.
at::Tensor lse_to_packed(const at::Tensor& lse, const AttentionParams& p, const Packed& packed) {
  const at::Tensor rows = lse.permute({1, 0, 2}).reshape({p.heads, p.batch * p.query_len});
  const at::Tensor ordered =
      packed.index_q.defined() ? at::empty_like(rows).index_copy_(1, packed.index_q, rows) : rows;
  return ordered.masked_fill(at::isneginf(ordered), kInf).contiguous();
}

}  // namespace

std::optional<FlashPacking> flash_group_packing(const AttentionParams& p,
                                                const std::optional<at::Tensor>& key_lengths) {
  if (p.head_kinds.empty() || p.dropout_p > 0.0 || p.head_dim != p.value_dim) return std::nullopt;
  if (p.batch == 0 || p.heads == 0 || p.query_len == 0 || p.key_len == 0 || p.head_dim == 0) return std::nullopt;
  const int64_t kind = p.head_kinds[0];
  for (const int64_t other : p.head_kinds) {
    if (other != kind) return std::nullopt;
  }
  return flash_packing(kind, p.query_len, p.key_len, p.query_offset, key_lengths.has_value());
}

FlashTriple flash_group_forward(const AttentionParams& p, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                const std::optional<at::Tensor>& key_lengths, const FlashKernels& kernels,
                                FlashPackingCache* packing_cache) {
  const auto packing = flash_group_packing(p, key_lengths);
  TORCH_CHECK(packing.has_value(), "mma_nmt.attention: FlashAttention-2 cannot compute this call exactly");
  const at::ScalarType stats = stats_dtype(q.scalar_type());
  if (*packing == FlashPacking::kNone) {
    FlashCall call = kind_call(p);
    call.max_q = p.query_len;
    call.max_k = p.key_len;
    const auto [out, lse] = kernels.forward(as_bthd(q), as_bthd(k), as_bthd(v), call);  // (B, T, H, D), (B, H, T)
    return {out.transpose(1, 2), lse.to(stats).contiguous(), at::empty({0}, q.options())};  // out position-major
  }
  const Packed packed = packed_call(p, *packing, *key_lengths, packing_cache);
  const at::Tensor q_rows = packed.index_q.defined() ? pack(q, packed.index_q) : as_rows(q);  // (B T, H, D)
  const auto [out, lse] = kernels.forward(q_rows, pack(k, packed.index_k), pack(v, packed.index_k), packed.call);
  const bool padded_queries = packed.index_q.defined();
  return {unpack(out, packed.index_q, p.batch, p.query_len, *key_lengths, padded_queries),
          lse_from_packed(lse, p, packed, *key_lengths, stats), at::empty({0}, q.options())};
}

FlashTriple flash_group_backward(const AttentionParams& p, const at::Tensor& grad_out, const at::Tensor& q,
                                 const at::Tensor& k, const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse,
                                 const std::optional<at::Tensor>& key_lengths, const FlashKernels& kernels,
                                 FlashPackingCache* packing_cache) {
  const auto packing = flash_group_packing(p, key_lengths);
  TORCH_CHECK(packing.has_value(), "mma_nmt.attention_backward: FlashAttention-2 cannot compute this call exactly");
  if (*packing == FlashPacking::kNone) {
    FlashCall call = kind_call(p);
    call.max_q = p.query_len;
    call.max_k = p.key_len;
    const auto [grad_q, grad_k, grad_v] = kernels.backward(as_bthd(grad_out), as_bthd(q), as_bthd(k), as_bthd(v),
                                                           as_bthd(out), lse.contiguous(), call);
    return {grad_q.transpose(1, 2), grad_k.transpose(1, 2), grad_v.transpose(1, 2)};  // (B, T, H, D) -> (B, H, T, D)
  }
  const Packed packed = packed_call(p, *packing, *key_lengths, packing_cache);
  const auto query_rows = [&](const at::Tensor& x) {  // (B, H, T, D) -> (B T, H, D), packed with the keys if so
    return packed.index_q.defined() ? pack(x, packed.index_q) : as_rows(x);
  };
  const auto [grad_q, grad_k, grad_v] =
      kernels.backward(query_rows(grad_out), query_rows(q), pack(k, packed.index_k), pack(v, packed.index_k),
                       query_rows(out), lse_to_packed(lse, p, packed), packed.call);
  return {unpack(grad_q, packed.index_q, p.batch, p.query_len, *key_lengths, packed.index_q.defined()),
          unpack(grad_k, packed.index_k, p.batch, p.key_len, *key_lengths, true),
          unpack(grad_v, packed.index_k, p.batch, p.key_len, *key_lengths, true)};
}

}  // namespace mma_nmt::attention
