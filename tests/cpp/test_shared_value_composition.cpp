// mma_nmt::shared_value_attention by composition (shared_value_composition.h), the CUDA backend's path, run on CPU
// tensors against the CPU kernel through the dispatcher: padding with length-1 and empty sentences (rows without
// keys), one decoder step and whole target sequences, weights returned or not, forward and backward.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <array>
#include <optional>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "luong/shared_value_composition.h"
#include "padding_nan.h"

namespace {

using Triple = std::tuple<at::Tensor, at::Tensor, at::Tensor>;
using ForwardFn = Triple(const at::Tensor&, const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
                         double, bool);
using BackwardFn = Triple(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                          const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&, double);

struct Case {
  std::string name;
  int64_t batch, heads, query_len, key_len, head_dim, value_dim;
  std::vector<int64_t> key_lengths;  // empty: no padding
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

const Case kCases[] = {
    {"StepWithLengthOneAndEmptySentence", 3, 4, 1, 6, 8, 5, {6, 1, 0}},
    {"AllStepsTNotS", 2, 2, 5, 9, 7, 3, {9, 4}},
    {"NoPadding", 2, 3, 4, 4, 16, 16, {}},
};

// q, k, v, grad_out and the key lengths of a case, random in `dtype`.
struct Inputs {
  at::Tensor q, k, v, grad_out;
  std::optional<at::Tensor> lengths;
};

Inputs random_inputs(const Case& c, at::ScalarType dtype) {
  const auto options = at::TensorOptions().dtype(dtype);
  return {at::randn({c.batch, c.heads, c.query_len, c.head_dim}, options),
          at::randn({c.batch, c.heads, c.key_len, c.head_dim}, options),
          at::randn({c.batch, c.key_len, c.value_dim}, options),
          at::randn({c.batch, c.heads, c.query_len, c.value_dim}, options),
          c.key_lengths.empty() ? std::nullopt : std::optional<at::Tensor>(at::tensor(c.key_lengths))};
}

class SharedValueCompositionMatchesCpuKernel : public ::testing::TestWithParam<std::tuple<Case, at::ScalarType>> {};

TEST_P(SharedValueCompositionMatchesCpuKernel, ForwardAndBackward) {
  const auto& [c, dtype] = GetParam();
  at::manual_seed(29);
  const auto [q, k, v, grad_out, lengths] = random_inputs(c, dtype);
  const double scale = 0.3, tolerance = dtype == at::kDouble ? 1e-10 : 2e-5;
  const auto p = mma_nmt::luong::check_shared_value_args("test", q, k, v, lengths, scale);
  const auto close = [&](const at::Tensor& got, const at::Tensor& want, const char* what) {
    ASSERT_EQ(got.sizes(), want.sizes()) << what;
    ASSERT_EQ(got.scalar_type(), want.scalar_type()) << what;
    // -inf (lse of rows without keys) must match exactly; a NaN anywhere fails allclose.
    EXPECT_TRUE(at::equal(at::isneginf(got), at::isneginf(want))) << what << ": rows without keys";
    const at::Tensor infinite = at::isinf(want);
    const at::Tensor a = got.masked_fill(infinite, 0), b = want.masked_fill(infinite, 0);
    EXPECT_TRUE(at::allclose(a, b, tolerance, tolerance)) << what << ": max difference "
                                                          << (a - b).abs().max().item<double>();
  };

  const auto forward =
      c10::Dispatcher::singleton().findSchemaOrThrow("mma_nmt::shared_value_attention", "").typed<ForwardFn>();
  for (const bool return_probs : {true, false}) {
    const auto [out, lse, probs] = forward.call(q, k, v, lengths, scale, return_probs);
    const auto [c_out, c_lse, c_probs] =
        mma_nmt::luong::shared_value_forward_by_composition(p, q, k, v, lengths, return_probs);
    close(c_out, out, "out");
    close(c_lse, lse, "lse");
    close(c_probs, probs, "probs");
  }

  const auto [out, lse, probs] = forward.call(q, k, v, lengths, scale, false);
  const auto backward = c10::Dispatcher::singleton()
                            .findSchemaOrThrow("mma_nmt::shared_value_attention_backward", "")
                            .typed<BackwardFn>();
  const auto [grad_q, grad_k, grad_v] = backward.call(grad_out, q, k, v, out, lse, lengths, scale);
  const auto [c_grad_q, c_grad_k, c_grad_v] =
      mma_nmt::luong::shared_value_backward_by_composition(p, grad_out, q, k, v, out, lse, lengths);
  close(c_grad_q, grad_q, "grad_q");
  close(c_grad_k, grad_k, "grad_k");
  close(c_grad_v, grad_v, "grad_v");

  if (!lengths.has_value()) return;  // NaN behind the padding changes nothing
  using mma_nmt::testing::expect_untouched_by_padding;
  const at::Tensor nan_k = mma_nmt::testing::with_nan_padding(k, *lengths);
  const at::Tensor nan_v = mma_nmt::testing::with_nan_padding(v, *lengths);
  const auto [clean_out, clean_lse, clean_probs] =
      mma_nmt::luong::shared_value_forward_by_composition(p, q, k, v, lengths, true);
  const auto [n_out, n_lse, n_probs] = mma_nmt::luong::shared_value_forward_by_composition(p, q, nan_k, nan_v, lengths, true);
  expect_untouched_by_padding(n_out, clean_out, "out");
  expect_untouched_by_padding(n_lse, clean_lse, "lse");
  expect_untouched_by_padding(n_probs, clean_probs, "probs");
  const auto [n_grad_q, n_grad_k, n_grad_v] =
      mma_nmt::luong::shared_value_backward_by_composition(p, grad_out, q, nan_k, nan_v, out, lse, lengths);
  expect_untouched_by_padding(n_grad_q, c_grad_q, "grad_q");
  expect_untouched_by_padding(n_grad_k, c_grad_k, "grad_k");
  expect_untouched_by_padding(n_grad_v, c_grad_v, "grad_v");
}

// Each of the three results `got` in its dtype of `dtypes`, within 3 % of the largest |want| plus `absolute` of the
// float64 results `want`, where bfloat16's 8 bits of q and k reach the logits and every GEMM's result rounds to them;
// -inf (the lse of a row without keys) must be -inf in both.
void expect_near_float64(const Triple& got, const Triple& want, const std::array<const char*, 3>& names,
                         const std::array<at::ScalarType, 3>& dtypes, double absolute) {
  const at::Tensor wants[] = {std::get<0>(want), std::get<1>(want), std::get<2>(want)};
  const at::Tensor gots[] = {std::get<0>(got), std::get<1>(got), std::get<2>(got)};
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(gots[i].scalar_type(), dtypes[i]) << names[i];
    ASSERT_EQ(gots[i].sizes(), wants[i].sizes()) << names[i];
    const at::Tensor finite = wants[i].isfinite();
    ASSERT_TRUE(gots[i].isfinite().equal(finite)) << names[i];
    const double error = (gots[i].to(at::kDouble) - wants[i]).masked_fill(finite.logical_not(), 0).abs().max()
                             .item<double>();
    const double size = wants[i].masked_fill(finite.logical_not(), 0).abs().max().item<double>();
    EXPECT_LE(error, 0.03 * size + absolute) << names[i] << ": max error " << error << " against max " << size;
  }
}

// The CUDA default in half precision: the backward's GEMMs in bfloat16 (on CPU tensors here), against the CPU kernel
// in float64. The bound is bfloat16's: 8 significant bits in the logits and in every GEMM's result.
class SharedValueBackwardInBfloat16 : public ::testing::TestWithParam<Case> {};

TEST_P(SharedValueBackwardInBfloat16, NearFloat64) {
  const Case& c = GetParam();
  at::manual_seed(31);
  const auto [q, k, v, grad_out, lengths] = random_inputs(c, at::kDouble);
  const double scale = 0.3;
  const auto forward =
      c10::Dispatcher::singleton().findSchemaOrThrow("mma_nmt::shared_value_attention", "").typed<ForwardFn>();
  const auto backward = c10::Dispatcher::singleton()
                            .findSchemaOrThrow("mma_nmt::shared_value_attention_backward", "")
                            .typed<BackwardFn>();
  const auto [out, lse, probs] = forward.call(q, k, v, lengths, scale, false);
  const Triple want = backward.call(grad_out, q, k, v, out, lse, lengths, scale);

  const auto bf16 = [](const at::Tensor& x) { return x.to(at::kBFloat16); };
  const at::Tensor q16 = bf16(q), k16 = bf16(k), v16 = bf16(v);
  const auto p = mma_nmt::luong::check_shared_value_args("test", q16, k16, v16, lengths, scale);
  // As on the GPU: the half-precision forward keeps lse in float.
  const Triple got = mma_nmt::luong::shared_value_backward_by_composition(p, bf16(grad_out), q16, k16, v16, bf16(out),
                                                                          lse.to(at::kFloat), lengths);
  expect_near_float64(got, want, {"grad_q", "grad_k", "grad_v"}, {at::kBFloat16, at::kBFloat16, at::kBFloat16}, 1e-3);
}

INSTANTIATE_TEST_SUITE_P(Cases, SharedValueBackwardInBfloat16, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

// The forward in bfloat16, which only MMA_NMT_CUDA_KERNELS=composition sends here on the GPU (the hand-written kernel
// is the default in every dtype): out and the weights in bfloat16 near the CPU kernel's float64 ones, lse in float.
class SharedValueForwardInBfloat16 : public ::testing::TestWithParam<Case> {};

TEST_P(SharedValueForwardInBfloat16, NearFloat64) {
  const Case& c = GetParam();
  at::manual_seed(37);
  const auto [q, k, v, grad_out, lengths] = random_inputs(c, at::kDouble);
  const double scale = 0.3;
  const auto forward =
      c10::Dispatcher::singleton().findSchemaOrThrow("mma_nmt::shared_value_attention", "").typed<ForwardFn>();
  const Triple want = forward.call(q, k, v, lengths, scale, true);

  const auto bf16 = [](const at::Tensor& x) { return x.to(at::kBFloat16); };
  const auto p = mma_nmt::luong::check_shared_value_args("test", bf16(q), bf16(k), bf16(v), lengths, scale);
  const Triple got = mma_nmt::luong::shared_value_forward_by_composition(p, bf16(q), bf16(k), bf16(v), lengths, true);
  expect_near_float64(got, want, {"out", "lse", "probs"}, {at::kBFloat16, at::kFloat, at::kBFloat16}, 1e-2);
}

INSTANTIATE_TEST_SUITE_P(Cases, SharedValueForwardInBfloat16, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

INSTANTIATE_TEST_SUITE_P(
    Cases, SharedValueCompositionMatchesCpuKernel,
    ::testing::Combine(::testing::ValuesIn(kCases), ::testing::Values(at::kDouble, at::kFloat)),
    [](const ::testing::TestParamInfo<std::tuple<Case, at::ScalarType>>& info) {
      return std::get<0>(info.param).name + "_" + c10::toString(std::get<1>(info.param));
    });

}  // namespace
