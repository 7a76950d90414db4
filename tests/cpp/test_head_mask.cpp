// visible_keys() against the SPEC's definition of each head kind, enumerated key by key.
#include <gtest/gtest.h>

#include <cstdlib>

#include "attention/head_mask.h"

namespace mma_nmt::attention {
namespace {

bool spec_visible(int64_t kind, int64_t i, int64_t j, int64_t window, int64_t key_len) {
  if (j < 0 || j >= key_len) return false;
  switch (kind) {
    case kGlobal: return true;
    case kLocal: return std::llabs(i - j) <= window;
    case kForward: return j >= i;
    case kBackward:
    case kCausal: return j <= i;
    default: return false;
  }
}

TEST(HeadMask, IntervalEqualsSpecDefinitionForEveryKind) {
  for (int64_t kind = 0; kind < kNumHeadKinds; ++kind) {
    for (int64_t key_len = 0; key_len <= 9; ++key_len) {
      for (int64_t window = 0; window <= 4; ++window) {
        for (int64_t i = -3; i <= 12; ++i) {
          const KeyRange r = visible_keys(kind, i, window, key_len);
          for (int64_t j = -2; j <= key_len + 2; ++j) {
            const bool in_range = j >= r.begin && j < r.end;
            EXPECT_EQ(in_range, spec_visible(kind, i, j, window, key_len))
                << "kind=" << kind << " i=" << i << " j=" << j << " w=" << window << " len=" << key_len;
          }
        }
      }
    }
  }
}

TEST(HeadMask, LocalHeadCostIsBoundedByWindow) {
  for (int64_t i = 0; i < 1000; ++i) {
    EXPECT_LE(visible_keys(kLocal, i, 3, 1000).size(), 7);
  }
}

TEST(HeadMask, EmptyIntervalHasZeroSize) {
  const KeyRange r = visible_keys(kLocal, 20, 1, 5);  // query far past the padded sentence
  EXPECT_TRUE(r.empty());
  EXPECT_EQ(r.size(), 0);
}

}  // namespace
}  // namespace mma_nmt::attention
