// The mapping of head kinds onto FlashAttention-2's windows and variable-length sequences (attention/flash_plan.h),
// checked row by row against our rule (head_mask.h) for every kind, window, size, offset and sentence length up to
// small bounds: where flash_sequences takes a call, FA2's bottom-right anchored window shows each row exactly the keys
// ours does (or the row is a padding query of a call its caller declared self-attention, which may come out 0); where
// it refuses one, the mapping it would otherwise have used is wrong, cross-attention with T = S by chance included.
// Then the device-side sequence starts over a padded batch in place.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "attention/flash_calls.h"  // flash_sequence_starts_on_host
#include "attention/flash_plan.h"
#include "attention/flash_sequence_starts.h"
#include "attention/head_mask.h"

namespace {

using mma_nmt::attention::FlashSequences;
using mma_nmt::attention::KeyRange;

bool same_keys(KeyRange a, KeyRange b) { return (a.empty() && b.empty()) || (a.begin == b.begin && a.end == b.end); }

// FA2's (queries, keys) of sentence b's sequence of real rows.
std::pair<int64_t, int64_t> sequence_sizes(FlashSequences sequences, int64_t query_len, int64_t key_len,
                                           int64_t sentence) {
  switch (sequences) {
    case FlashSequences::kBatched:
      return {query_len, key_len};
    case FlashSequences::kRealKeys:
      return {query_len, sentence};
    default:  // kRealQueriesAndKeys
      return {sentence, sentence};
  }
}

// The first row where FA2 under `sequences` disagrees with our rule, "" if none (the padding queries of a call declared
// self-attention aside: SPEC lets those rows come out 0).
std::string first_disagreement(int64_t kind, int64_t window, int64_t query_len, int64_t key_len, int64_t offset,
                               int64_t sentence, FlashSequences sequences, bool self_attention) {
  const auto [queries, keys] = sequence_sizes(sequences, query_len, key_len, sentence);
  const auto w = mma_nmt::attention::flash_window(kind, window);
  for (int64_t row = 0; row < query_len; ++row) {
    const KeyRange ours = mma_nmt::attention::visible_keys(kind, row + offset, window, sentence);
    if (row >= queries) {  // left out of FA2's sequence: only a padding query of self-attention may be
      if (self_attention && row >= sentence) continue;
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

TEST(FlashPlan, WindowsGiveOurRuleWhereverTheSequencesAreTakenAndNotWhereTheyAreRefused) {
  using namespace mma_nmt::attention;
  int64_t taken = 0, refused = 0;
  for (const int64_t kind : {kGlobal, kLocal, kForward, kBackward, kCausal}) {
    for (const int64_t window : {0, 1, 2}) {
      for (int64_t query_len = 1; query_len <= 6; ++query_len) {
        for (int64_t key_len = 1; key_len <= 6; ++key_len) {
          for (int64_t offset = 0; offset <= key_len; ++offset) {
            for (const bool padded : {false, true}) {
              // the operator accepts self_attention only with T = S and no offset (check_attention_args)
              for (const bool self : {false, true}) {
                if (self && (query_len != key_len || offset != 0)) continue;
                for (int64_t sentence = padded ? 0 : key_len; sentence <= key_len; ++sentence) {
                  const auto where = [&] {
                    std::ostringstream os;
                    os << "kind " << kind << " w " << window << " T " << query_len << " S " << key_len << " offset "
                       << offset << " J " << sentence << (padded ? " padded" : "") << (self ? " self" : " cross");
                    return os.str();
                  };
                  const std::optional<FlashSequences> sequences =
                      flash_sequences(kind, query_len, key_len, offset, padded, self);
                  if (sequences.has_value()) {
                    ++taken;
                    EXPECT_EQ(
                        first_disagreement(kind, window, query_len, key_len, offset, sentence, *sequences, self), "")
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
  }
  EXPECT_GT(taken, 1000);
  EXPECT_GT(refused, 1000);
}

TEST(FlashPlan, TheRefusedCallsWouldBeWrongUnderTheNearestSequences) {
  using namespace mma_nmt::attention;
  // a forward head with padding and T != S (a cross-attention of F heads): FA2's diagonal sits J - T away, ours at 0
  EXPECT_FALSE(flash_sequences(kForward, 3, 5, 0, true, false).has_value());
  EXPECT_NE(first_disagreement(kForward, 1, 3, 5, 0, 4, FlashSequences::kRealKeys, false), "");
  // a cross-attention of B, C or L heads with padding and T = S by chance: the query rows past a sentence's keys are
  // real target positions and see keys (all of them, for B and C), which the real-queries sequences would leave out
  for (const int64_t kind : {kBackward, kCausal, kLocal}) {
    EXPECT_FALSE(flash_sequences(kind, 4, 4, 0, true, false).has_value()) << kind;
    EXPECT_TRUE(flash_sequences(kind, 4, 4, 0, true, true).has_value()) << kind;
    EXPECT_NE(first_disagreement(kind, 1, 4, 4, 0, 2, FlashSequences::kRealQueriesAndKeys, false), "") << kind;
    EXPECT_EQ(first_disagreement(kind, 1, 4, 4, 0, 2, FlashSequences::kRealQueriesAndKeys, true), "") << kind;
  }
  // causal attention with padding and an offset (three queries after two cached keys): FA2's diagonal sits at the
  // sentence's end, ours at the query's position. (One query, T = 1, would agree: a row at or past its sentence's
  // end sees every real key either way; flash_sequences does not take that case yet.)
  EXPECT_FALSE(flash_sequences(kCausal, 3, 5, 2, true, false).has_value());
  EXPECT_NE(first_disagreement(kCausal, 1, 3, 5, 2, 4, FlashSequences::kRealKeys, false), "");
  // no padding, an offset other than FA2's own S - T
  EXPECT_FALSE(flash_sequences(kBackward, 3, 5, 0, false, false).has_value());
  EXPECT_NE(first_disagreement(kBackward, 1, 3, 5, 0, 5, FlashSequences::kBatched, false), "");
  // the windows of the issue, each kind
  EXPECT_EQ(flash_window(kLocal, 3).left, 3);
  EXPECT_EQ(flash_window(kLocal, 3).right, 3);
  EXPECT_EQ(flash_window(kForward, 3).left, 0);
  EXPECT_EQ(flash_window(kForward, 3).right, -1);
  EXPECT_EQ(flash_window(kCausal, 3).left, -1);
  EXPECT_EQ(flash_window(kCausal, 3).right, 0);
}

// Sentence b's three sequences, as [begin, end) row ranges of the (B L,) rows.
std::vector<std::pair<int64_t, int64_t>> sequences_of(const at::Tensor& starts, int64_t sentence) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (int64_t s = 3 * sentence; s < 3 * sentence + 3; ++s) {
    out.push_back({starts[s].item<int64_t>(), starts[s + 1].item<int64_t>()});
  }
  return out;
}

TEST(FlashPlan, SequenceStartsCutEachSentenceInPlaceIntoItsRealRowsAndItsPaddingRows) {
  using mma_nmt::attention::kEveryQueryStarts;
  using mma_nmt::attention::kKeyStarts;
  using mma_nmt::attention::kRealQueryStarts;
  const std::vector<int64_t> lengths{3, 0, 7, 2, -1};  // clamped to [0, S], as the kernels clamp them
  const int64_t batch = 5;
  // self-attention (T = S: every row used) and cross-attention (the keys' rows over S, every query's over T)
  for (const auto& [query_len, key_len] : {std::pair<int64_t, int64_t>{5, 5}, {4, 6}}) {
    const at::Tensor table =
        mma_nmt::attention::flash_sequence_starts_on_host(at::tensor(lengths), query_len, key_len);
    EXPECT_EQ(table.scalar_type(), at::kInt);  // FA2's cu_seqlens
    ASSERT_EQ(table.sizes(), (at::IntArrayRef{3, 3 * batch + 1}));
    const at::Tensor keys = table[kKeyStarts], queries = table[kRealQueryStarts];
    const at::Tensor all_queries = table[kEveryQueryStarts];
    for (const auto& [starts, len] : {std::pair<at::Tensor, int64_t>{keys, key_len}, {queries, query_len},
                                      {all_queries, query_len}}) {
      EXPECT_TRUE(starts.is_contiguous());
      EXPECT_EQ(starts[0].item<int64_t>(), 0);
      EXPECT_EQ(starts[3 * batch].item<int64_t>(), batch * len);
      // consecutive sequences: every row in exactly one, each sentence's rows in its own three
      EXPECT_TRUE((starts.narrow(0, 1, 3 * batch) >= starts.narrow(0, 0, 3 * batch)).all().item<bool>());
      for (int64_t b = 0; b < batch; ++b) EXPECT_EQ(starts[3 * b].item<int64_t>(), b * len) << "sentence " << b;
    }
    for (int64_t b = 0; b < batch; ++b) {
      using Ranges = std::vector<std::pair<int64_t, int64_t>>;
      const int64_t real_keys = std::clamp<int64_t>(lengths[b], 0, key_len), key_begin = b * key_len;
      const int64_t key_split = key_begin + real_keys, key_end = key_begin + key_len;
      // keys: the real ones, an empty sequence, the padding ones (a sequence without queries: FA2 gives them
      // gradient 0)
      EXPECT_EQ(sequences_of(keys, b), (Ranges{{key_begin, key_split}, {key_split, key_split}, {key_split, key_end}}))
          << b;
      // every query row real: all in the first sequence
      const int64_t begin = b * query_len, end = begin + query_len;
      EXPECT_EQ(sequences_of(all_queries, b), (Ranges{{begin, end}, {end, end}, {end, end}})) << b;
      if (query_len != key_len) continue;  // real queries: self-attention's alone
      // queries: the real ones, the padding ones (a sequence without keys: FA2 gives them output 0), an empty sequence
      const int64_t split = begin + real_keys;
      EXPECT_EQ(sequences_of(queries, b), (Ranges{{begin, split}, {split, end}, {end, end}})) << b;
    }
  }
  // So that, sequence by sequence, real queries meet real keys, padding queries no key and padding keys no query.
}

TEST(FlashPlan, SequenceStartsRefuseBatchesWhoseRowsOverflowInt32) {
  const at::Tensor lengths = at::zeros({3}, at::kLong);
  EXPECT_NO_THROW(mma_nmt::attention::flash_sequence_starts_on_host(lengths, 2, (int64_t{1} << 31) / 3 - 1));
  EXPECT_THROW(mma_nmt::attention::flash_sequence_starts_on_host(lengths, 2, (int64_t{1} << 31) / 3 + 1), c10::Error);
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
  EXPECT_FALSE(flash_by_default(128 * 8, 64, 64, true, true));   // padded: measured slower there (packed then)
  EXPECT_FALSE(flash_by_default(128 * 8, 64, 64, false, false));  // mixed kinds: a flash call per kind, unmeasured
}

}  // namespace
