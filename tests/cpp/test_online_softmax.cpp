// The streaming softmax and the dropout hash shared by the CPU and CUDA kernels.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "attention/dropout_hash.h"
#include "common/online_softmax.h"

namespace mma_nmt::attention {
namespace {

// Feeds `logits` tile by tile and accumulates sum_j w_j * values_j the way the kernels do.
double streamed_weighted_sum(const std::vector<double>& logits, const std::vector<double>& values, size_t tile,
                             OnlineSoftmax<double>& state) {
  double acc = 0;
  for (size_t start = 0; start < logits.size(); start += tile) {
    const size_t end = std::min(logits.size(), start + tile);
    double tile_max = -INFINITY;
    for (size_t j = start; j < end; ++j) tile_max = std::max(tile_max, logits[j]);
    acc *= state.raise_max(tile_max);
    for (size_t j = start; j < end; ++j) {
      const double w = state.weight(logits[j]);
      state.add(w);
      acc += w * values[j];
    }
  }
  return acc * state.inverse_sum();
}

TEST(OnlineSoftmax, TiledResultEqualsTwoPassSoftmax) {
  std::mt19937 gen(3);
  std::normal_distribution<double> normal(0.0, 8.0);
  for (size_t n : {1, 2, 7, 64, 129}) {
    for (size_t tile : {1, 3, 16, 200}) {
      std::vector<double> logits(n), values(n);
      for (size_t j = 0; j < n; ++j) logits[j] = normal(gen), values[j] = normal(gen);
      double m = -INFINITY, z = 0, expected = 0;
      for (double l : logits) m = std::max(m, l);
      for (size_t j = 0; j < n; ++j) z += std::exp(logits[j] - m), expected += std::exp(logits[j] - m) * values[j];
      OnlineSoftmax<double> state;
      EXPECT_NEAR(streamed_weighted_sum(logits, values, tile, state), expected / z, 1e-12);
      EXPECT_NEAR(state.log_sum_exp(), m + std::log(z), 1e-12);
      EXPECT_NEAR(probability_from_lse(logits[0], state.log_sum_exp()), std::exp(logits[0] - m) / z, 1e-12);
    }
  }
}

TEST(OnlineSoftmax, HugeLogitsStayFinite) {
  OnlineSoftmax<float> state;
  state.raise_max(1e30f);
  state.add(state.weight(1e30f));
  EXPECT_TRUE(std::isfinite(state.log_sum_exp()));
  EXPECT_FLOAT_EQ(state.inverse_sum(), 1.0f);
}

TEST(OnlineSoftmax, RowWithoutKeysIsZeroNotNan) {
  const OnlineSoftmax<float> state;
  EXPECT_EQ(state.inverse_sum(), 0.0f);
  EXPECT_TRUE(std::isinf(state.log_sum_exp()) && state.log_sum_exp() < 0);
  EXPECT_EQ(probability_from_lse(3.0f, state.log_sum_exp()), 0.0f);
}

TEST(DropoutHash, KeepRateMatchesProbabilityAndIsDeterministic) {
  for (double p : {0.1, 0.3, 0.5}) {
    const uint32_t threshold = dropout_threshold(p);
    int kept = 0;
    const int n = 200000;
    for (int i = 0; i < n; ++i) kept += dropout_bits(42, static_cast<uint64_t>(i)) >= threshold;
    EXPECT_NEAR(static_cast<double>(kept) / n, 1.0 - p, 0.005) << "p=" << p;
  }
  EXPECT_EQ(dropout_bits(7, 123456789ULL), dropout_bits(7, 123456789ULL));
  EXPECT_NE(dropout_bits(7, 1), dropout_bits(8, 1));
}

TEST(DropoutHash, ZeroProbabilityKeepsEverything) {
  for (uint64_t i = 0; i < 1000; ++i) EXPECT_GE(dropout_bits(1, i), dropout_threshold(0.0));
}

}  // namespace
}  // namespace mma_nmt::attention
