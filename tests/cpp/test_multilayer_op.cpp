// mma_nmt::multilayer_attention's two implementations against each other: the CPU kernel (through the dispatcher) and
// the composition that the CUDA backend runs (multilayer_arrangement.h), here on CPU tensors, where it calls the CPU
// attention operator. No GPU is available to run the CUDA registration itself; this checks everything it does.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <string>
#include <tuple>
#include <vector>

#include "multilayer/multilayer_arrangement.h"

namespace {

using Triple = std::tuple<at::Tensor, at::Tensor, at::Tensor>;
using Lists = std::tuple<std::vector<at::Tensor>, std::vector<at::Tensor>, std::vector<at::Tensor>>;
using ForwardFn = Triple(at::TensorList, at::TensorList, at::TensorList, const std::optional<at::Tensor>&, int64_t,
                         double, bool, bool);
using BackwardFn = Lists(const at::Tensor&, at::TensorList, at::TensorList, at::TensorList, const at::Tensor&,
                         const at::Tensor&, const std::optional<at::Tensor>&, const std::optional<at::Tensor>&,
                         int64_t, double, bool);

std::vector<at::Tensor> randn_list(int64_t count, at::IntArrayRef shape) {
  std::vector<at::Tensor> out;
  for (int64_t i = 0; i < count; ++i) out.push_back(at::randn(shape, at::TensorOptions().dtype(at::kDouble)));
  return out;
}

void expect_all_close(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(at::allclose(a[i], b[i], 1e-10, 1e-12)) << what << "[" << i << "]";
}

struct Mode {
  bool layer_specific;
  int64_t value_sets;
};

class ArrangedMatchesCpuKernel : public ::testing::TestWithParam<Mode> {};

TEST_P(ArrangedMatchesCpuKernel, ForwardAndBackward) {
  const Mode mode = GetParam();
  at::manual_seed(3);
  const int64_t batch = 3, steps = 5, src = 7, heads = 2, dim = 3, value_dim = 4, layers = 3;
  const auto q = randn_list(layers, {batch, steps, heads * dim}), k = randn_list(layers, {batch, src, heads * dim});
  const auto v = randn_list(mode.value_sets, {batch, src, heads * value_dim});
  const at::Tensor lengths = at::tensor(std::vector<int64_t>{7, 2, 0});
  const auto forward = c10::Dispatcher::singleton().findSchemaOrThrow("mma_nmt::multilayer_attention", "")
                           .typed<ForwardFn>();
  const auto backward = c10::Dispatcher::singleton().findSchemaOrThrow("mma_nmt::multilayer_attention_backward", "")
                            .typed<BackwardFn>();
  auto [out, lse, probs] = forward.call(q, k, v, lengths, heads, 0.6, mode.layer_specific, true);
  auto [out_a, lse_a, probs_a] = mma_nmt::multilayer::multilayer_attention_by_arrangement(
      q, k, v, lengths, heads, 0.6, mode.layer_specific, true);
  EXPECT_TRUE(at::allclose(out, out_a, 1e-10, 1e-12));
  EXPECT_TRUE(at::allclose(probs, probs_a, 1e-10, 1e-12));
  EXPECT_TRUE(at::equal(at::isneginf(lse), at::isneginf(lse_a)));
  EXPECT_TRUE(at::allclose(lse.nan_to_num(0, 0, 0), lse_a.nan_to_num(0, 0, 0), 1e-10, 1e-12));
  const at::Tensor grad_out = at::randn_like(out);
  auto [gq_a, gk_a, gv_a] = mma_nmt::multilayer::multilayer_attention_backward_by_arrangement(
      grad_out, q, k, v, out, lse, std::nullopt, lengths, heads, 0.6, mode.layer_specific);
  for (const bool saved : {false, true}) {  // the CPU kernel recomputes the weights, or reads the forward's
    const std::optional<at::Tensor> weights = saved ? std::optional<at::Tensor>(probs) : std::nullopt;
    auto [gq, gk, gv] = backward.call(grad_out, q, k, v, out, lse, weights, lengths, heads, 0.6, mode.layer_specific);
    expect_all_close(gq, gq_a, saved ? "grad_q from saved weights" : "grad_q");
    expect_all_close(gk, gk_a, saved ? "grad_k from saved weights" : "grad_k");
    expect_all_close(gv, gv_a, saved ? "grad_v from saved weights" : "grad_v");
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, ArrangedMatchesCpuKernel,
                         ::testing::Values(Mode{false, 3}, Mode{false, 1}, Mode{true, 3}),
                         [](const ::testing::TestParamInfo<Mode>& info) {
                           return std::string(info.param.layer_specific ? "LayerSpecific" : "Joint") +
                                  std::to_string(info.param.value_sets) + "ValueSets";
                         });

TEST(MultilayerOp, ArrangedPathChecksItsArguments) {
  const auto q = randn_list(2, {1, 2, 4}), k = randn_list(1, {1, 3, 4}), v = randn_list(2, {1, 3, 4});
  try {
    mma_nmt::multilayer::multilayer_attention_by_arrangement(q, k, v, std::nullopt, 2, 0.5, false, false);
    FAIL() << "expected an error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("k must hold one tensor per layer like q (2), got 1"), std::string::npos)
        << e.what();
  }
}

}  // namespace
