// NaN behind the key padding (issue 50, case 12): what the composition tests share to check that a key past a
// sentence's length never touches a result. The compositions run torch's kernels (SDPA, matmul), which multiply a
// padding key's weight 0 by its value (0 * NaN = NaN) unless the keys are zeroed first (without_padding_keys).
#pragma once

#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <limits>
#include <string>
#include <vector>

namespace mma_nmt::testing {

// x (B, ..., S, D) with NaN at every key past its sentence's length (lengths (B,)).
inline at::Tensor with_nan_padding(const at::Tensor& x, const at::Tensor& lengths) {
  const int64_t key_len = x.size(-2);
  std::vector<int64_t> shape(x.dim(), 1);  // (B, 1, ..., S, 1)
  shape[0] = x.size(0);
  shape[x.dim() - 2] = key_len;
  const at::Tensor padding = at::arange(key_len).view({1, key_len}) >= lengths.view({-1, 1});  // (B, S)
  return x.masked_fill(padding.view(shape), std::numeric_limits<double>::quiet_NaN());
}

// The result with NaN in the padding is the result without it, bit for bit, and holds no NaN.
inline void expect_untouched_by_padding(const at::Tensor& got, const at::Tensor& clean, const std::string& what) {
  EXPECT_FALSE(at::isnan(got).any().item<bool>()) << what << ": a NaN behind the padding reached the result";
  EXPECT_TRUE(at::equal(got.masked_fill(at::isnan(got), 0), clean)) << what << ": differs from the result without NaN";
}

}  // namespace mma_nmt::testing
