// How a group of heads of one kind maps onto FlashAttention-2's variable-length call (issue 48, point 1): the window
// sizes per kind, when FA2's bottom-right anchored windows give exactly our rule (head_mask.h), and the packing of a
// padded batch into cumulative sequence lengths, computed on the device without a host read. Plain ATen and host
// code: CI checks all of it on the CPU (tests/cpp/test_flash_plan.cpp). No operator calls FA2 through it yet: that
// path must first run on a GPU (docs/cuda.md, section 2).
//
// FA2's rule (Dao-AILab/flash-attention, flash_attn_interface.py, "window_size"): in a sequence of s_q queries and s_k
// keys, query i sees keys j in [i + s_k - s_q - left, i + s_k - s_q + right] within [0, s_k), -1 meaning unbounded on
// that side. Ours: row i of sentence b sees visible_keys(kind, i + query_offset, window, J_b). The two agree when each
// sentence is one FA2 sequence with s_k = J_b (its real keys) and s_k - s_q = query_offset, i.e. s_q = J_b -
// query_offset queries; FA2 then leaves the rows past s_q out.
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <optional>

#include "attention/head_mask.h"

namespace mma_nmt::attention {

// Without MMA_NMT_CUDA_KERNELS, flash serves half-precision calls of one head kind from this many query-key pairs
// per sentence on. The H200 measured (bfloat16, benchmarks/results/2026-11-28.nmt-sizes.notes.md) the hand-written
// kernel ahead at NMT sizes (global heads, B 128 T 64, forward+backward: 1.5 ms against flash's 3.3; its 4 launches
// against flash's packing), about level at T = S = 128 (3.5 against 3.3 ms) and flash far ahead from T = S = 512
// (3.8 against 22.1 ms; 1024: 2.7 against 45.0). 256 x 256 lies between the last tie and the first clear win.
constexpr int64_t kFlashDefaultMinPairs = 256 * 256;

// Calls of one head kind without key padding (the decoder's causal self-attention in training, unpadded batches) go
// to flash's batched call, with no packing, from this many query-key pairs in the whole call (B x H x T x S). The
// H200 measured (bfloat16, H 8, D 64, 2026-11-29: benchmarks/results/2026-11-29.nmt-sizes.notes.md) flash through
// the operator 1.35-3.1x ahead of the hand-written kernels from 2^22 pairs (B 32 T 128, B 128 T 64, B 64 T 128;
// global and causal heads, forward+backward) and level at 2^21 (B 64 T 64, B 256 T 32). Padded calls keep the
// per-sentence rule: packing the variable-length call cost 76 launches a step there (global heads, B 32 T 128: 2.1 ms
// against 1.1). Mixed kinds split into a flash call per kind were not measured at these sizes, and keep it too.
constexpr int64_t kFlashUnpaddedMinPairs = int64_t{1} << 22;

// batch_heads: B x H of the call; padded: whether it has key lengths; uniform: whether its heads are of one kind.
inline bool flash_by_default(int64_t batch_heads, int64_t query_len, int64_t key_len, bool padded, bool uniform) {
  const int64_t pairs = query_len * key_len;
  return pairs >= kFlashDefaultMinPairs || (!padded && uniform && batch_heads * pairs >= kFlashUnpaddedMinPairs);
}

// FA2's (window_size_left, window_size_right) for a kind: G (-1, -1), L (w, w), F (0, -1), B and C (-1, 0).
struct FlashWindow {
  int64_t left;
  int64_t right;
};

inline FlashWindow flash_window(int64_t kind, int64_t window) {
  switch (kind) {
    case kLocal:
      return {window, window};
    case kForward:
      return {0, -1};
    case kBackward:
    case kCausal:
      return {-1, 0};
    default:  // kGlobal
      return {-1, -1};
  }
}

// The keys FA2 shows query `row` of a sequence of `queries` queries and `keys` keys (the rule above).
inline KeyRange flash_visible_keys(FlashWindow w, int64_t row, int64_t queries, int64_t keys) {
  const int64_t diagonal = row + keys - queries;
  const int64_t begin = w.left < 0 ? 0 : std::max<int64_t>(diagonal - w.left, 0);
  const int64_t end = w.right < 0 ? keys : std::min<int64_t>(diagonal + w.right + 1, keys);
  return KeyRange{begin, end};
}

// How the rows of a group's call become FA2 sequences, or why they cannot.
enum class FlashPacking {
  kNone,         // no key padding: each sentence is one sequence of T queries and S keys, as laid out (B * T, B * S)
  kPackedKeys,   // G heads with padding: all T queries of a sentence, its J_b real keys packed (s_k = J_b). A
                 // sentence without keys is a sequence without keys: FA2 is said to write output 0 and lse +inf
                 // there (unmeasured), where ours is -inf, so a caller maps those rows' lse
  kPackedBoth,   // self-attention with padding (T = S, no offset): queries and keys packed to J_b each; the query rows
                 // past a sentence's length (its padding positions) come out 0, as SPEC's shared rules allow there
};

// The packing that makes FA2 compute exactly our rule for a group of `kind` (every row that is not a padding query of
// self-attention), or nullopt where none does: with key padding, a non-global kind needs s_q = J_b - query_offset,
// which only self-attention (T = S, no offset) gives; without padding, the offset must be FA2's own S - T.
inline std::optional<FlashPacking> flash_packing(int64_t kind, int64_t query_len, int64_t key_len, int64_t query_offset,
                                                 bool padded) {
  if (kind == kGlobal) return padded ? FlashPacking::kPackedKeys : FlashPacking::kNone;  // unbounded: no alignment
  if (!padded) {
    if (key_len - query_len != query_offset) return std::nullopt;
    return FlashPacking::kNone;
  }
  if (query_len == key_len && query_offset == 0) return FlashPacking::kPackedBoth;
  return std::nullopt;
}

// (B + 1,) int32 cumulative lengths of the sequences [0, J_0, J_0 + J_1, ...], lengths clamped to [0, max_len] as
// the kernels clamp them; on the lengths' device, with no host read (FA2 takes int32 cu_seqlens).
inline at::Tensor cumulative_lengths(const at::Tensor& lengths, int64_t max_len) {
  const at::Tensor clamped = lengths.clamp(0, max_len).to(at::kInt);  // (B,)
  return at::constant_pad_nd(at::cumsum(clamped, 0, at::kInt), {1, 0}, 0);  // (B + 1,)
}

// (B * L,) int64: where row (b, j) of a (B, L, ...) batch goes in the packed layout: the J_b real rows of every
// sentence first, in order (row (b, j) at cu[b] + j), then every padding row, in order. A permutation of 0 .. B L - 1,
// so index_copy packs and index_select unpacks with no size read on the host: FA2 reads only the first cu[B] rows.
inline at::Tensor packing_index(const at::Tensor& lengths, int64_t max_len) {
  const at::Tensor clamped = lengths.clamp(0, max_len).to(at::kLong).view({-1, 1});              // (B, 1)
  const at::Tensor position = at::arange(max_len, clamped.options()).view({1, max_len});          // (1, L)
  const at::Tensor real = position < clamped;                                                     // (B, L)
  const at::Tensor real_before = at::cumsum(clamped, 0) - clamped;                                // (B, 1)
  const at::Tensor total_real = clamped.sum();                                                    // ()
  const int64_t batch = clamped.size(0);
  const at::Tensor row = at::arange(batch, clamped.options()).view({batch, 1}) * max_len + position;  // (B, L)
  const at::Tensor padding_before = row - real_before - clamped;  // (B, L): padding rows before (b, j), for j >= J_b
  return at::where(real, real_before + position, total_real + padding_before).view({-1});
}

}  // namespace mma_nmt::attention
