// Which keys a query may see, per head kind (SPEC section 1). Shared by the CPU and CUDA kernels.
//
// Every kind makes the visible keys one contiguous interval, so a kernel never builds a T x S mask: it asks for the
// interval and loops over it, and a local head costs O(window) per query.
#pragma once

#include "common/host_device.h"

namespace mma_nmt::attention {

// Values are part of the operator's schema (the `head_kinds` list); Python mirrors them in mma_nmt/ops/head_spec.py.
enum HeadKind : int64_t {
  kGlobal = 0,    // G: every key.
  kLocal = 1,     // L: |i - j| <= window.
  kForward = 2,   // F: j >= i (itself and the future).
  kBackward = 3,  // B: j <= i (itself and the past).
  kCausal = 4,    // C: j <= i, the decoder's self-attention; same interval as B, kept apart for clarity of intent.
};
constexpr int64_t kNumHeadKinds = 5;

// Half-open interval [begin, end) of key indices.
struct KeyRange {
  int64_t begin;
  int64_t end;
  MMA_HOST_DEVICE bool empty() const { return begin >= end; }
  MMA_HOST_DEVICE int64_t size() const { return end > begin ? end - begin : 0; }
};

// Keys visible to the query at position `query_pos` (key coordinates: query row i sits at i + query_offset) for a head
// of `kind`, in a sentence whose first `key_len` keys are real and the rest padding.
MMA_HOST_DEVICE KeyRange visible_keys(int64_t kind, int64_t query_pos, int64_t window, int64_t key_len) {
  int64_t begin = 0;
  int64_t end = key_len;
  if (kind == kLocal) {
    begin = query_pos - window;
    end = query_pos + window + 1;
  } else if (kind == kForward) {
    begin = query_pos;
  } else if (kind == kBackward || kind == kCausal) {
    end = query_pos + 1;
  }
  begin = max_of(begin, 0);
  end = min_of(end, key_len);
  return KeyRange{begin, end};
}

// The query rows (0 <= i < query_len) that see at least one key of [key_begin, key_end): one interval, as for keys,
// because both ends of visible_keys never decrease as the query moves right. So a kernel that owns a tile of keys
// (their dK and dV) visits exactly these rows, and no two tiles write the same key. Found by two binary searches:
// the first row whose keys end past key_begin, then the first row whose keys begin at or past key_end.
MMA_HOST_DEVICE KeyRange visible_queries(int64_t kind, int64_t key_begin, int64_t key_end, int64_t window,
                                         int64_t query_offset, int64_t query_len, int64_t key_len) {
  key_end = min_of(key_end, key_len);
  if (key_begin >= key_end) return KeyRange{0, 0};
  int64_t lo = 0, hi = query_len;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (visible_keys(kind, mid + query_offset, window, key_len).end > key_begin) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  const int64_t first = lo;
  hi = query_len;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (visible_keys(kind, mid + query_offset, window, key_len).begin >= key_end) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return KeyRange{first, lo};
}

}  // namespace mma_nmt::attention
