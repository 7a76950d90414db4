// common/head_layout.h: gradient_strides, which the CUDA warp backward lays its dK/dV accumulators out by, gives the
// strides gradient_like allocates, for every layout the models and tests hand the kernels.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <string>
#include <utility>
#include <vector>

#include "common/head_layout.h"

namespace {

TEST(HeadLayout, GradientStridesAreGradientLikesWithoutAllocating) {
  const std::pair<std::string, at::Tensor> inputs[] = {
      {"contiguous", at::randn({2, 3, 5, 4})},
      // a head view of a (B, L, H D) projection: dense, position-major
      {"head view", at::randn({2, 5, 12}).view({2, 5, 3, 4}).transpose(1, 2)},
      // k of a fused (B, L, 2 H D) key-value projection: not dense
      {"fused projection", at::randn({2, 5, 24}).view({2, 5, 2, 3, 4}).select(2, 0).transpose(1, 2)},
      // the last dimension strided: the gradient goes position-major
      {"strided rows", at::randn({2, 3, 4, 5}).transpose(2, 3)},
      {"one feature", at::randn({2, 3, 5, 1})},
      {"empty batch", at::randn({0, 3, 5, 4})},
      {"bfloat16 head view", at::randn({2, 5, 12}).to(at::kBFloat16).view({2, 5, 3, 4}).transpose(1, 2)},
  };
  for (const auto& [name, input] : inputs) {
    const std::vector<int64_t> strides = mma_nmt::gradient_strides(input);
    EXPECT_EQ(strides, mma_nmt::gradient_like(input).strides().vec()) << name;
    EXPECT_EQ(strides, mma_nmt::gradient_like(input, at::kFloat).strides().vec()) << name << ", float";
    // dense: a buffer of numel elements holds a gradient of that layout
    EXPECT_TRUE(at::empty_strided(input.sizes(), strides).is_non_overlapping_and_dense()) << name;
  }
}

}  // namespace
