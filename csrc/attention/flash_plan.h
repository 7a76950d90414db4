// How a group of heads of one kind maps onto FlashAttention-2's variable-length call (issue 48, point 1): the window
// sizes per kind, when FA2's bottom-right anchored windows give exactly our rule (head_mask.h), and the sequences of
// a padded batch as cumulative starts over its rows in place (flash_sequence_starts.h: computed on the device without a
// host read). Host code: CI checks all of it on the CPU (tests/cpp/test_flash_plan.cpp); attention/flash_calls.h calls
// FA2 through it.
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
// against 1.1). Since 2026-12-01 a padded batch is no longer packed (its sequences lie in place:
// flash_sequence_starts.h; since 2026-12-02 3 ATen ops a direction around FA2 for one kind), which the next lease
// measures before this rule changes. Mixed kinds split into a flash call per kind were not measured at these sizes,
// and keep it too.
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

// How the rows of a group's call become FA2 sequences, or why they cannot. A padded batch stays where it lies: FA2's
// variable-length call reads the (B L, H, D) rows of each (B, L, H, D) tensor in place, every sentence cut into three
// sequences (flash_sequence_starts.h): its real queries with its real keys, its padding queries with no keys, no
// queries with its padding keys. FA2 writes output 0 and lse +inf for the rows of a sequence without keys, and zero
// gradients for the keys of a sequence without queries, without reading either side's rows ("This also covers the case
// where actual_seqlen_k == 0" and "actual_seqlen_q == 0", flash_fwd_kernel.h and flash_bwd_kernel.h): nothing is
// packed or unpacked, no padding row is read, and a NaN behind the padding cannot leak.
enum class FlashSequences {
  kBatched,             // no key padding: each sentence is one sequence of T queries and S keys (FA2's batched call)
  kRealKeys,            // G heads with padding: all T queries of a sentence against its J_b real keys. A sentence
                        // without keys is a sequence without keys: output 0, lse +inf, which a caller maps to ours
                        // (-inf)
  kRealQueriesAndKeys,  // self-attention with padding (the caller's self_attention: T = S, no offset): the J_b real
                        // queries against the J_b real keys; the padding query rows come out 0 (a sequence without
                        // keys), as SPEC's shared rules allow there, with lse -inf and no gradient
};

// The sequences that make FA2 compute exactly our rule for a group of `kind` (every row that is not a padding query of
// self-attention), or nullopt where none do: with key padding, a non-global kind needs s_q = J_b - query_offset, which
// the real queries of self-attention give (their padding rows are then left out). `self_attention` is the caller's
// word for that, never inferred from T = S: in cross-attention with T = S by chance, the query rows past a sentence's
// key length are real target positions, and a backward or local head there sees keys (the hand-written kernel
// computes them). Without padding, the offset must be FA2's own S - T.
inline std::optional<FlashSequences> flash_sequences(int64_t kind, int64_t query_len, int64_t key_len,
                                                     int64_t query_offset, bool padded, bool self_attention) {
  if (kind == kGlobal) return padded ? FlashSequences::kRealKeys : FlashSequences::kBatched;  // no alignment needed
  if (!padded) {
    if (key_len - query_len != query_offset) return std::nullopt;
    return FlashSequences::kBatched;
  }
  if (self_attention && query_len == key_len && query_offset == 0) return FlashSequences::kRealQueriesAndKeys;
  return std::nullopt;
}

}  // namespace mma_nmt::attention
