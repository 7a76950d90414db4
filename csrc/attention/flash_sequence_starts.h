// FlashAttention-2's cumulative sequence starts for a padded batch lying in place (flash_plan.h, FlashSequences), one
// entry at a time: the arithmetic that the CUDA kernel (cuda/flash_sequence_starts_kernel.cuh, one launch per operator
// call) and its host twin (flash_calls.cpp, on CPU tensors) share, so that the CPU tests check what the GPU computes.
//
// The table is (3, 3 B + 1) int32, one row of FA2 cu_seqlens per way of cutting the rows. Every sentence b is cut into
// three consecutive sequences of its L rows [b L, (b + 1) L); R_b is its real keys, key_lengths[b] clamped to [0, S]:
//   - kKeyStarts, over the S key rows: its real keys, an empty sequence, its padding keys (no query sees them: FA2
//     gives them zero gradients);
//   - kEveryQueryStarts, over the T query rows: all of them, then two empty sequences (kRealKeys: every query is real);
//   - kRealQueryStarts, over the T = S query rows of self-attention: its real queries, its padding queries (a sequence
//     without keys: FA2 gives them output 0), an empty sequence (kRealQueriesAndKeys).
// Sequence by sequence, real queries meet real keys, padding queries no key and padding keys no query.
#pragma once

#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "common/host_device.h"
#include "common/key_lengths.h"

namespace mma_nmt::attention {

enum FlashStartsRow : int { kKeyStarts = 0, kEveryQueryStarts = 1, kRealQueryStarts = 2 };
constexpr int kFlashStartsRows = 3;

// Entries per row: three sequences a sentence, and the end of the last.
MMA_HOST_DEVICE int64_t flash_starts_entries(int64_t batch) { return 3 * batch + 1; }

// Entry `entry` in [0, 3 B] of `row`. `key_lengths`: (B,) int64 on the caller's side (host or device), never null
// here (an unpadded call takes FA2's batched form). Every value is at most B x max(T, S), which the caller checks
// fits int32, FA2's type.
MMA_HOST_DEVICE int32_t flash_sequence_start(int row, int64_t entry, int64_t batch, const int64_t* key_lengths,
                                             int64_t query_len, int64_t key_len) {
  const int64_t len = row == kKeyStarts ? key_len : query_len;
  if (entry >= 3 * batch) return static_cast<int32_t>(batch * len);
  const int64_t sentence = entry / 3, part = entry % 3;
  const int64_t begin = sentence * len;
  if (part == 0) return static_cast<int32_t>(begin);
  if (row == kEveryQueryStarts) return static_cast<int32_t>(begin + len);
  const int64_t real = min_of(keys_of_sentence(key_lengths, sentence, key_len), len);
  if (row == kKeyStarts || part == 1) return static_cast<int32_t>(begin + real);
  return static_cast<int32_t>(begin + len);  // kRealQueryStarts' third sequence: empty, at the sentence's end
}

// Host side, before the table is made: FA2 numbers the rows in int32.
inline void check_flash_rows_fit_int32(int64_t batch, int64_t query_len, int64_t key_len) {
  const int64_t rows = batch * std::max(query_len, key_len);
  TORCH_CHECK(rows <= std::numeric_limits<int32_t>::max(), "mma_nmt.attention: FlashAttention-2 numbers the rows of a ",
              "padded batch in int32; ", batch, " x ", std::max(query_len, key_len), " rows do not fit (set ",
              "MMA_NMT_CUDA_KERNELS=handwritten)");
}

}  // namespace mma_nmt::attention
