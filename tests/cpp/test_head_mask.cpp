// visible_keys() against the SPEC's definition of each head kind, enumerated key by key, and visible_queries() (the
// rows a tile of keys serves) against the rows found by enumeration.
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

TEST(HeadMask, VisibleQueriesAreExactlyTheRowsThatSeeAKeyOfTheTile) {
  for (int64_t kind = 0; kind < kNumHeadKinds; ++kind) {
    for (int64_t key_len = 0; key_len <= 7; ++key_len) {
      for (int64_t window = 0; window <= 3; ++window) {
        for (int64_t offset = 0; offset <= 4; offset += 2) {
          for (int64_t query_len = 0; query_len <= 8; ++query_len) {
            for (int64_t begin = 0; begin <= 8; ++begin) {
              for (int64_t end = begin; end <= begin + 4; ++end) {
                const KeyRange rows = visible_queries(kind, begin, end, window, offset, query_len, key_len);
                for (int64_t i = -1; i <= query_len; ++i) {
                  bool sees = false;
                  for (int64_t j = begin; j < end; ++j) sees = sees || spec_visible(kind, i + offset, j, window, key_len);
                  sees = sees && i >= 0 && i < query_len;
                  EXPECT_EQ(i >= rows.begin && i < rows.end, sees)
                      << "kind=" << kind << " i=" << i << " keys=[" << begin << ", " << end << ") w=" << window
                      << " offset=" << offset << " T=" << query_len << " len=" << key_len;
                }
              }
            }
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
