// The fused attention operator called through the dispatcher from C++, with no Python involved.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <cmath>
#include <tuple>
#include <vector>

#include "attention_op_types.h"

namespace {

using mma_nmt::testing::AttentionFn;

c10::TypedOperatorHandle<AttentionFn> attention_op() {
  return c10::Dispatcher::singleton().findSchemaOrThrow("mma_nmt::attention", "").typed<AttentionFn>();
}

// Global-head attention with key padding, written with ATen ops.
at::Tensor naive_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& lengths,
                           double scale) {
  at::Tensor logits = at::matmul(q, k.transpose(-1, -2)) * scale;                      // (B, H, T, S)
  at::Tensor pad = at::arange(k.size(2)).unsqueeze(0) >= lengths.unsqueeze(1);          // (B, S)
  logits = logits.masked_fill(pad.unsqueeze(1).unsqueeze(1), -INFINITY);
  return at::matmul(at::softmax(logits, -1), v);
}

TEST(AttentionOp, GlobalHeadsMatchNaiveAttention) {
  at::manual_seed(0);
  const auto opts = at::TensorOptions().dtype(at::kDouble);
  const at::Tensor q = at::randn({2, 3, 5, 8}, opts), k = at::randn({2, 3, 7, 8}, opts), v = at::randn({2, 3, 7, 4}, opts);
  const at::Tensor lengths = at::tensor(std::vector<int64_t>{7, 3});
  const std::vector<int64_t> kinds{0, 0, 0};
  auto [out, lse, probs] = attention_op().call(q, k, v, lengths, kinds, 0, 0.25, 0, 0.0, 0, false, false);
  EXPECT_TRUE(at::allclose(out, naive_attention(q, k, v, lengths, 0.25), 1e-10, 1e-10));
  EXPECT_EQ(probs.numel(), 0);
  EXPECT_EQ(lse.sizes(), at::IntArrayRef({2, 3, 5}));
}

TEST(AttentionOp, LocalHeadWithZeroWindowReturnsOwnValue) {
  const auto opts = at::TensorOptions().dtype(at::kFloat);
  const at::Tensor q = at::randn({1, 1, 6, 4}, opts), k = at::randn({1, 1, 6, 4}, opts), v = at::randn({1, 1, 6, 4}, opts);
  const std::vector<int64_t> kinds{1};
  auto [out, lse, probs] = attention_op().call(q, k, v, std::nullopt, kinds, 0, 0.5, 0, 0.0, 0, true, false);
  EXPECT_TRUE(at::allclose(out, v));
  EXPECT_TRUE(at::allclose(probs[0][0], at::eye(6, opts)));
}

TEST(AttentionOp, BadInputThrowsNamingTheArgument) {
  const at::Tensor q = at::randn({1, 2, 3, 4}), k = at::randn({1, 2, 3, 5}), v = at::randn({1, 2, 3, 4});
  const std::vector<int64_t> kinds{0, 0};
  try {
    attention_op().call(q, k, v, std::nullopt, kinds, 0, 0.5, 0, 0.0, 0, false, false);
    FAIL() << "expected an error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("k must have shape [1, 2, 3, 4]"), std::string::npos) << e.what();
  }
}

}  // namespace
