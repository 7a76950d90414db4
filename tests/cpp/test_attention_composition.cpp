// mma_nmt::attention by composition (attention_composition.h), the CUDA backend's path for uniform head kinds, run on
// CPU tensors (torch's CPU flash kernel) against the CPU kernel through the dispatcher: every kind it takes, each form the
// visibility takes (no mask, is_causal, boolean mask), padding with length-1 and empty sentences, T != S, a query
// offset, forward and backward.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <optional>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "attention/attention_composition.h"
#include "attention/head_mask.h"

namespace {

using mma_nmt::attention::AttentionParams;
using Triple = std::tuple<at::Tensor, at::Tensor, at::Tensor>;
using AttentionFn = Triple(const at::Tensor&, const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
                           at::IntArrayRef, int64_t, double, int64_t, double, int64_t, bool);
using AttentionBackwardFn = Triple(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                   const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
                                   at::IntArrayRef, int64_t, double, int64_t, double, int64_t);

struct Case {
  std::string name;
  int64_t kind, batch, query_len, key_len, dim;
  std::vector<int64_t> key_lengths;  // empty: no padding
  int64_t query_offset = 0;
};

// gtest prints a failing case by its name.
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

const Case kCases[] = {
    {"GlobalNoPaddingNoMask", mma_nmt::attention::kGlobal, 2, 5, 9, 8, {}},
    {"GlobalPaddedEmptySentence", mma_nmt::attention::kGlobal, 3, 4, 6, 8, {6, 1, 0}},
    {"CausalIsCausal", mma_nmt::attention::kCausal, 2, 7, 7, 16, {}},
    {"CausalPaddedWithOffset", mma_nmt::attention::kCausal, 2, 1, 7, 16, {7, 3}, 6},
    {"BackwardTNotS", mma_nmt::attention::kBackward, 2, 5, 3, 8, {}},
    // rows past a sentence's last key see nothing: fully masked rows inside a padded sentence
    {"ForwardPaddedFullyMaskedRows", mma_nmt::attention::kForward, 3, 6, 6, 4, {6, 2, 1}},
};

constexpr double kScale = 0.35;
constexpr int64_t kWindow = 1;

class AttentionCompositionMatchesCpuKernel : public ::testing::TestWithParam<std::tuple<Case, at::ScalarType>> {};

TEST_P(AttentionCompositionMatchesCpuKernel, ForwardAndBackward) {
  const auto& [c, dtype] = GetParam();
  at::manual_seed(13);
  const auto options = at::TensorOptions().dtype(dtype);
  const int64_t heads = 3;
  const at::Tensor q = at::randn({c.batch, heads, c.query_len, c.dim}, options);
  const at::Tensor k = at::randn({c.batch, heads, c.key_len, c.dim}, options);
  const at::Tensor v = at::randn({c.batch, heads, c.key_len, c.dim}, options);
  const at::Tensor grad_out = at::randn({c.batch, heads, c.query_len, c.dim}, options);
  const std::optional<at::Tensor> lengths =
      c.key_lengths.empty() ? std::nullopt : std::optional<at::Tensor>(at::tensor(c.key_lengths));
  const std::vector<int64_t> kinds(heads, c.kind);
  const AttentionParams p = mma_nmt::attention::check_attention_args("test", q, k, v, lengths, kinds, kWindow, kScale,
                                                                     c.query_offset, 0.0, 0);
  ASSERT_TRUE(mma_nmt::attention::composable(p, false));
  const double tolerance = dtype == at::kDouble ? 1e-10 : 2e-5;
  const auto close = [&](const at::Tensor& got, const at::Tensor& want, const char* what) {
    ASSERT_EQ(got.sizes(), want.sizes()) << what;
    EXPECT_TRUE(at::allclose(got, want, tolerance, tolerance, /*equal_nan=*/false))
        << what << ": max difference " << (got - want).abs().nan_to_num(1e30).max().item<double>() << " (1e30: NaN)";
  };

  const auto forward = c10::Dispatcher::singleton().findSchemaOrThrow("mma_nmt::attention", "").typed<AttentionFn>();
  const auto [out, lse, probs] = forward.call(q, k, v, lengths, kinds, kWindow, kScale, c.query_offset, 0.0, 0, false);
  const auto composed = mma_nmt::attention::attention_forward_by_sdpa(p, q, k, v, lengths);
  ASSERT_TRUE(composed.has_value()) << "torch has a CPU flash kernel for every dtype tested";
  close(std::get<0>(*composed), out, "out");
  EXPECT_TRUE(at::equal(at::isneginf(std::get<1>(*composed)), at::isneginf(lse))) << "rows without keys";
  const at::Tensor without_keys = at::isneginf(lse);  // compared above; a NaN anywhere else fails allclose
  close(std::get<1>(*composed).masked_fill(without_keys, 0), lse.masked_fill(without_keys, 0), "lse");
  EXPECT_EQ(std::get<1>(*composed).scalar_type(), lse.scalar_type());
  EXPECT_EQ(std::get<2>(*composed).numel(), 0);

  const auto backward =
      c10::Dispatcher::singleton().findSchemaOrThrow("mma_nmt::attention_backward", "").typed<AttentionBackwardFn>();
  const auto [grad_q, grad_k, grad_v] =
      backward.call(grad_out, q, k, v, out, lse, lengths, kinds, kWindow, kScale, c.query_offset, 0.0, 0);
  const auto grads = mma_nmt::attention::attention_backward_by_sdpa(p, grad_out, q, k, v, out, lse, lengths);
  ASSERT_TRUE(grads.has_value());
  close(std::get<0>(*grads), grad_q, "grad_q");
  close(std::get<1>(*grads), grad_k, "grad_k");
  close(std::get<2>(*grads), grad_v, "grad_v");
}

INSTANTIATE_TEST_SUITE_P(
    UniformKinds, AttentionCompositionMatchesCpuKernel,
    ::testing::Combine(::testing::ValuesIn(kCases), ::testing::Values(at::kDouble, at::kFloat)),
    [](const ::testing::TestParamInfo<std::tuple<Case, at::ScalarType>>& info) {
      return std::get<0>(info.param).name + "_" + c10::toString(std::get<1>(info.param));
    });

TEST(AttentionComposition, LeavesMixedAndLocalKindsDropoutWeightsAndUnequalHeadSizesToTheKernel) {
  const at::Tensor q = at::randn({1, 2, 3, 4}), v = at::randn({1, 2, 3, 4}), v6 = at::randn({1, 2, 3, 6});
  const auto params = [&](std::vector<int64_t> kinds, double dropout, const at::Tensor& values) {
    return mma_nmt::attention::check_attention_args("test", q, q, values, std::nullopt, kinds, 1, 0.5, 0, dropout, 0);
  };
  EXPECT_TRUE(mma_nmt::attention::composable(params({0, 0}, 0.0, v), false));
  EXPECT_FALSE(mma_nmt::attention::composable(params({0, 1}, 0.0, v), false));
  EXPECT_FALSE(mma_nmt::attention::composable(params({1, 1}, 0.0, v), false));  // local: O(window) in the kernel
  EXPECT_FALSE(mma_nmt::attention::composable(params({0, 0}, 0.1, v), false));
  EXPECT_FALSE(mma_nmt::attention::composable(params({0, 0}, 0.0, v), true));
  EXPECT_FALSE(mma_nmt::attention::composable(params({0, 0}, 0.0, v6), false));
}

}  // namespace
