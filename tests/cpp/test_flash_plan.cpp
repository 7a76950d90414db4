// The mapping of head kinds onto FlashAttention-2's windows and variable-length sequences (attention/flash_plan.h),
// checked row by row against our rule (head_mask.h) for every kind, window, size, offset and sentence length up to
// small bounds: where flash_packing takes a call, FA2's bottom-right anchored window shows each row exactly the keys
// ours does (or the row is a padding query of self-attention, which may come out 0); where it refuses one, the
// mapping it would otherwise have used is wrong. Then the device-side cumulative lengths and the packing permutation.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "attention/flash_plan.h"
#include "attention/head_mask.h"

namespace {

using mma_nmt::attention::FlashPacking;
using mma_nmt::attention::KeyRange;

bool same_keys(KeyRange a, KeyRange b) { return (a.empty() && b.empty()) || (a.begin == b.begin && a.end == b.end); }

// FA2's (queries, keys) of sentence b's sequence under a packing.
std::pair<int64_t, int64_t> sequence_sizes(FlashPacking packing, int64_t query_len, int64_t key_len, int64_t sentence) {
  switch (packing) {
    case FlashPacking::kNone:
      return {query_len, key_len};
    case FlashPacking::kPackedKeys:
      return {query_len, sentence};
    default:  // kPackedBoth
      return {sentence, sentence};
  }
}

// The first row where FA2 under `packing` disagrees with our rule, "" if none (padding queries of kPackedBoth aside).
std::string first_disagreement(int64_t kind, int64_t window, int64_t query_len, int64_t key_len, int64_t offset,
                               int64_t sentence, FlashPacking packing) {
  const auto [queries, keys] = sequence_sizes(packing, query_len, key_len, sentence);
  const auto w = mma_nmt::attention::flash_window(kind, window);
  for (int64_t row = 0; row < query_len; ++row) {
    const KeyRange ours = mma_nmt::attention::visible_keys(kind, row + offset, window, sentence);
    if (row >= queries) {  // left out of FA2's sequence: only a padding query of self-attention may be
      if (packing == FlashPacking::kPackedBoth && row >= sentence) continue;
      if (ours.empty()) continue;  // FA2 writes nothing there; the row has no key either
      return "row " + std::to_string(row) + " left out";
    }
    const KeyRange flash = mma_nmt::attention::flash_visible_keys(w, row, queries, keys);
    if (!same_keys(ours, flash)) {
      std::ostringstream os;
      os << "row " << row << ": ours [" << ours.begin << ", " << ours.end << "), FA2 [" << flash.begin << ", "
         << flash.end << ")";
      return os.str();
    }
  }
  return "";
}

TEST(FlashPlan, WindowsGiveOurRuleWhereverThePackingIsTakenAndNotWhereItIsRefused) {
  using namespace mma_nmt::attention;
  int64_t taken = 0, refused = 0;
  for (const int64_t kind : {kGlobal, kLocal, kForward, kBackward, kCausal}) {
    for (const int64_t window : {0, 1, 2}) {
      for (int64_t query_len = 1; query_len <= 6; ++query_len) {
        for (int64_t key_len = 1; key_len <= 6; ++key_len) {
          for (int64_t offset = 0; offset <= key_len; ++offset) {
            for (const bool padded : {false, true}) {
              for (int64_t sentence = padded ? 0 : key_len; sentence <= key_len; ++sentence) {
                const auto where = [&] {
                  std::ostringstream os;
                  os << "kind " << kind << " w " << window << " T " << query_len << " S " << key_len << " offset "
                     << offset << " J " << sentence << (padded ? " padded" : "");
                  return os.str();
                };
                const std::optional<FlashPacking> packing =
                    flash_packing(kind, query_len, key_len, offset, padded);
                if (packing.has_value()) {
                  ++taken;
                  EXPECT_EQ(first_disagreement(kind, window, query_len, key_len, offset, sentence, *packing), "")
                      << where();
                } else {
                  ++refused;
                }
              }
            }
          }
        }
      }
    }
  }
  EXPECT_GT(taken, 1000);
  EXPECT_GT(refused, 1000);
}

TEST(FlashPlan, TheRefusedCallsWouldBeWrongUnderTheNearestPacking) {
  using namespace mma_nmt::attention;
  // a forward head with padding and T != S (a cross-attention of F heads): FA2's diagonal sits J - T away, ours at 0
  EXPECT_FALSE(flash_packing(kForward, 3, 5, 0, true).has_value());
  EXPECT_NE(first_disagreement(kForward, 1, 3, 5, 0, 4, FlashPacking::kPackedKeys), "");
  // causal attention with padding and an offset (three queries after two cached keys): FA2's diagonal sits at the
  // sentence's end, ours at the query's position. (One query, T = 1, would agree: a row at or past its sentence's
  // end sees every real key either way; flash_packing does not take that case yet.)
  EXPECT_FALSE(flash_packing(kCausal, 3, 5, 2, true).has_value());
  EXPECT_NE(first_disagreement(kCausal, 1, 3, 5, 2, 4, FlashPacking::kPackedKeys), "");
  // no padding, an offset other than FA2's own S - T
  EXPECT_FALSE(flash_packing(kBackward, 3, 5, 0, false).has_value());
  EXPECT_NE(first_disagreement(kBackward, 1, 3, 5, 0, 5, FlashPacking::kNone), "");
  // the windows of the issue, each kind
  EXPECT_EQ(flash_window(kLocal, 3).left, 3);
  EXPECT_EQ(flash_window(kLocal, 3).right, 3);
  EXPECT_EQ(flash_window(kForward, 3).left, 0);
  EXPECT_EQ(flash_window(kForward, 3).right, -1);
  EXPECT_EQ(flash_window(kCausal, 3).left, -1);
  EXPECT_EQ(flash_window(kCausal, 3).right, 0);
}

TEST(FlashPlan, CumulativeLengthsAreInt32AndClamped) {
  const at::Tensor cu = mma_nmt::attention::cumulative_lengths(at::tensor(std::vector<int64_t>{3, 0, 7, 2, -1}), 5);
  EXPECT_EQ(cu.scalar_type(), at::kInt);
  EXPECT_TRUE(at::equal(cu, at::tensor(std::vector<int32_t>{0, 3, 3, 8, 10, 10})));
}

TEST(FlashPlan, PackingIndexPutsEachSentencesRealRowsAtItsCumulativeStartAndIsAPermutation) {
  const std::vector<int64_t> lengths{3, 0, 5, 2};
  const int64_t max_len = 5, batch = 4;
  const at::Tensor index = mma_nmt::attention::packing_index(at::tensor(lengths), max_len);  // (B L,)
  ASSERT_EQ(index.numel(), batch * max_len);
  EXPECT_TRUE(at::equal(std::get<0>(index.sort()), at::arange(batch * max_len)));  // a permutation
  const at::Tensor cu = mma_nmt::attention::cumulative_lengths(at::tensor(lengths), max_len);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t j = 0; j < lengths[b]; ++j) {
      EXPECT_EQ(index[b * max_len + j].item<int64_t>(), cu[b].item<int64_t>() + j) << "b " << b << " j " << j;
    }
  }
  // pack (index_copy) and unpack (index_select) a (B, L, 2) batch: the real rows come back, in order, first
  const at::Tensor x = at::arange(batch * max_len * 2, at::kFloat).view({batch * max_len, 2});
  const at::Tensor packed = at::zeros_like(x).index_copy_(0, index, x);
  EXPECT_TRUE(at::equal(packed.index_select(0, index), x));
  EXPECT_TRUE(at::equal(packed.narrow(0, 0, 3), x.narrow(0, 0, 3)));          // sentence 0
  EXPECT_TRUE(at::equal(packed.narrow(0, 3, 5), x.narrow(0, 10, 5)));         // sentence 2 (sentence 1 is empty)
  EXPECT_TRUE(at::equal(packed.narrow(0, 8, 2), x.narrow(0, 15, 2)));         // sentence 3
}

TEST(FlashPlan, FlashIsTheDefaultFrom256By256PairsASentenceOr4MPairsAUniformCallWithoutPadding) {
  using mma_nmt::attention::flash_by_default;
  for (const bool padded : {true, false}) {
    for (const bool uniform : {true, false}) {
      EXPECT_FALSE(flash_by_default(64, 128, 128, padded, uniform));  // NMT sizes: the hand-written kernel ahead
      EXPECT_FALSE(flash_by_default(1, 255, 256, padded, uniform));
      EXPECT_TRUE(flash_by_default(1, 256, 256, padded, uniform));
      EXPECT_TRUE(flash_by_default(256, 512, 512, padded, uniform));  // flash measured 5.9x ahead
      EXPECT_FALSE(flash_by_default(8, 1, 4096, padded, uniform));    // a decoder step: 4096 pairs
      EXPECT_TRUE(flash_by_default(1, 64, 1024, padded, uniform));
    }
  }
  // One kind without key padding: from 2^22 pairs in the call (B x H x T x S), where flash measured 1.35-3.1x ahead.
  EXPECT_FALSE(flash_by_default(64 * 8, 64, 64, false, true));   // 2^21: level on the H200
  EXPECT_FALSE(flash_by_default(256 * 8, 32, 32, false, true));  // 2^21
  EXPECT_TRUE(flash_by_default(32 * 8, 128, 128, false, true));  // 2^22
  EXPECT_TRUE(flash_by_default(128 * 8, 64, 64, false, true));
  EXPECT_FALSE(flash_by_default(128 * 8, 64, 64, true, true));   // padded: packing costs more than it saves there
  EXPECT_FALSE(flash_by_default(128 * 8, 64, 64, false, false));  // mixed kinds: a flash call per kind, unmeasured
}

}  // namespace
