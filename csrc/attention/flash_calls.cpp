#include "attention/flash_calls.h"

#include <ATen/ATen.h>
#include <ATen/record_function.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "attention/attention_composition.h"
#include "attention/attention_outputs.h"  // stats_dtype
#include "attention/flash_sequence_starts.h"
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

// The call's sequence starts, computed by the first group that needs them (`cache`: the call's, shared by its groups).
const at::Tensor& call_starts(const AttentionParams& p, const at::Tensor& key_lengths, const FlashKernels& kernels,
                              FlashSequenceCache& cache) {
  if (!cache.starts.defined()) cache.starts = kernels.starts(key_lengths, p.query_len, p.key_len);
  return cache.starts;
}

// A padded group's call: the kind's window over its sentences' sequences.
FlashCall in_place_call(const AttentionParams& p, FlashSequences sequences, const at::Tensor& key_lengths,
                        const FlashKernels& kernels, FlashSequenceCache& cache) {
  const at::Tensor& starts = call_starts(p, key_lengths, kernels, cache);  // (3, 3 B + 1)
  FlashCall call = kind_call(p);
  call.cu_k = starts[kKeyStarts];
  call.cu_q = starts[sequences == FlashSequences::kRealQueriesAndKeys ? kRealQueryStarts : kEveryQueryStarts];
  return call;
}

// Whether a query row of an unpadded group of `kind` can see no key: a window that ends before the first key (B, C
// and L heads whose queries come before their keys, query_offset < 0). FA2 gives such a row lse +inf.
bool rows_before_their_first_key(int64_t kind, const AttentionParams& p) {
  if (kind == kGlobal || kind == kForward) return false;
  return p.query_offset + (kind == kLocal ? p.window : 0) < 0;
}

// Whether FA2 may have written lse +inf in some row of this call: a padded call (its sequences without keys) or an
// unpadded one with rows before their first key.
bool rows_without_keys_possible(const AttentionParams& p, bool padded) {
  if (padded) return true;
  return std::any_of(p.head_kinds.begin(), p.head_kinds.end(),
                     [&](int64_t kind) { return rows_before_their_first_key(kind, p); });
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

AttentionTriple flash_group_forward(const AttentionParams& p, const at::Tensor& q, const at::Tensor& k,
                                    const at::Tensor& v, const std::optional<at::Tensor>& key_lengths,
                                    const FlashKernels& kernels, FlashSequenceCache* cache) {
  const auto sequences = flash_group_sequences(p, key_lengths);
  TORCH_CHECK(sequences.has_value(), "mma_nmt.attention: FlashAttention-2 cannot compute this call exactly");
  const at::ScalarType stats = stats_dtype(q.scalar_type());
  if (*sequences == FlashSequences::kBatched) {
    const auto [out, lse] = kernels.forward(as_bthd(q), as_bthd(k), as_bthd(v), kind_call(p));  // (B, T, H, D), (B, H, T)
    return {out.transpose(1, 2), lse.to(stats), at::empty({0}, q.options())};  // out position-major
  }
  FlashSequenceCache own;
  const FlashCall call = in_place_call(p, *sequences, *key_lengths, kernels, cache != nullptr ? *cache : own);
  const auto [out, lse] = kernels.forward(as_rows(q), as_rows(k), as_rows(v), call);  // (B T, H, D), (H, B T)
  TORCH_CHECK(lse.dim() == 2 && lse.size(0) == p.heads && lse.size(1) == p.batch * p.query_len,
              "mma_nmt.attention: FlashAttention-2's variable-length lse has shape ", lse.sizes(),
              ", expected (heads, batch * query_len); set MMA_NMT_CUDA_KERNELS=handwritten");
  const at::Tensor lse_rows = lse.view({p.heads, p.batch, p.query_len}).permute({1, 0, 2});  // (H, B T) -> (B, H, T)
  return {from_rows(out, p.batch, p.query_len), lse_rows.to(stats), at::empty({0}, q.options())};
}

AttentionTriple flash_forward_per_kind(const AttentionParams& p, const at::Tensor& q, const at::Tensor& k,
                                       const at::Tensor& v, const std::optional<at::Tensor>& key_lengths,
                                       const AttentionKernels& kernels) {
  AttentionTriple result = attention_forward_per_kind(p, q, k, v, key_lengths, kernels);
  at::Tensor& lse = std::get<1>(result);
  if (!rows_without_keys_possible(p, key_lengths.has_value())) {
    lse = lse.contiguous();  // FA2's batched lse is already
    return result;
  }
  // -inf for the rows without keys, which FA2 gives +inf (the hand-written kernel's groups hold -inf there already),
  // and contiguous, in one kernel for the whole call. Every row with a visible key has a finite lse, and a NaN stays
  // NaN: a +inf marks a row without keys (or one whose logits overflowed, whose output is NaN whatever its lse says).
  const double nan = std::numeric_limits<double>::quiet_NaN();
  if (lse.is_contiguous()) {
    lse.nan_to_num_(nan, -kInf, -kInf);  // the call's own tensor: FA2's, or the groups' join
  } else {
    at::Tensor ours = at::empty(lse.sizes(), lse.options());
    lse = at::nan_to_num_out(ours, lse, nan, -kInf, -kInf);
  }
  return result;
}

AttentionTriple flash_group_backward(const AttentionParams& p, const at::Tensor& grad_out, const at::Tensor& q,
                                     const at::Tensor& k, const at::Tensor& v, const at::Tensor& out,
                                     const at::Tensor& lse, const std::optional<at::Tensor>& key_lengths,
                                     const FlashKernels& kernels, FlashSequenceCache* cache) {
  const auto sequences = flash_group_sequences(p, key_lengths);
  TORCH_CHECK(sequences.has_value(), "mma_nmt.attention_backward: FlashAttention-2 cannot compute this call exactly");
  if (*sequences == FlashSequences::kBatched) {
    const auto [grad_q, grad_k, grad_v] = kernels.backward(as_bthd(grad_out), as_bthd(q), as_bthd(k), as_bthd(v),
                                                           as_bthd(out), lse.contiguous(), kind_call(p));
    return {grad_q.transpose(1, 2), grad_k.transpose(1, 2), grad_v.transpose(1, 2)};  // (B, T, H, D) -> (B, H, T, D)
  }
  FlashSequenceCache own;
  const FlashCall call = in_place_call(p, *sequences, *key_lengths, kernels, cache != nullptr ? *cache : own);
  // Ours (B, H, T) -> FA2's (H, B T): a view where flash_backward_per_kind laid the call's lse out so, else a copy. Its
  // rows without keys hold -inf, which FA2 never reads: a sequence without keys has no key block to visit.
  const at::Tensor lse_rows = lse.permute({1, 0, 2}).reshape({p.heads, p.batch * p.query_len}).contiguous();
  const auto [grad_q, grad_k, grad_v] = kernels.backward(as_rows(grad_out), as_rows(q), as_rows(k), as_rows(v),
                                                         as_rows(out), lse_rows, call);
  return {from_rows(grad_q, p.batch, p.query_len), from_rows(grad_k, p.batch, p.key_len),
          from_rows(grad_v, p.batch, p.key_len)};
}

AttentionTriple flash_backward_per_kind(const AttentionParams& p, const at::Tensor& grad_out, const at::Tensor& q,
                                        const at::Tensor& k, const at::Tensor& v, const at::Tensor& out,
                                        const at::Tensor& lse, const std::optional<at::Tensor>& key_lengths,
                                        const AttentionKernels& kernels) {
  if (!key_lengths.has_value()) {  // FA2's batched call takes ours, (B, H, T)
    return attention_backward_per_kind(p, grad_out, q, k, v, out, lse, key_lengths, kernels);
  }
  // The variable-length call takes (H, B T) rows: one copy lays out the whole call's lse so, and each group's rows are
  // then a view (a mixed call copied once per group before). A group that FA2 does not take gets it as a strided view,
  // which its kernel makes contiguous.
  const at::Tensor by_head = lse.transpose(0, 1).contiguous().transpose(0, 1);  // (B, H, T) over (H, B, T) memory
  return attention_backward_per_kind(p, grad_out, q, k, v, out, by_head, key_lengths, kernels);
}

at::Tensor flash_sequence_starts_on_host(const at::Tensor& key_lengths, int64_t query_len, int64_t key_len) {
  RECORD_FUNCTION("mma_nmt::flash_sequence_starts", std::vector<c10::IValue>());  // one kernel on the GPU
  TORCH_CHECK(key_lengths.is_cpu() && key_lengths.scalar_type() == at::kLong && key_lengths.dim() == 1,
              "flash_sequence_starts_on_host: expected (B,) int64 CPU key lengths, got ", key_lengths.sizes(), " ",
              key_lengths.scalar_type(), " on ", key_lengths.device());
  const int64_t batch = key_lengths.size(0), entries = flash_starts_entries(batch);
  check_flash_rows_fit_int32(batch, query_len, key_len);
  const at::Tensor lengths = key_lengths.contiguous();
  at::Tensor table = at::empty({kFlashStartsRows, entries}, lengths.options().dtype(at::kInt));
  const int64_t* per_sentence = lengths.data_ptr<int64_t>();
  int32_t* out = table.data_ptr<int32_t>();
  for (int row = 0; row < kFlashStartsRows; ++row) {
    for (int64_t entry = 0; entry < entries; ++entry) {
      out[row * entries + entry] = flash_sequence_start(row, entry, batch, per_sentence, query_len, key_len);
    }
  }
  return table;
}

}  // namespace mma_nmt::attention
