// mma_nmt::multihop_second_hop's two implementations against each other: the CPU kernel (through the dispatcher) and
// the composition that the CUDA backend runs (second_hop_composition.h), here on CPU tensors, where its GEMMs are
// ATen's and its head gate is the CPU mma_nmt::multihop_gate. No GPU is available to run the CUDA registration
// itself; this checks everything it does.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <optional>
#include <string>
#include <tuple>
#include <utility>

#include "multihop/second_hop_composition.h"

namespace {

using Triple = std::tuple<at::Tensor, at::Tensor, at::Tensor>;
using Six = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;
using ForwardFn = Triple(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                         const std::optional<at::Tensor>&, const at::Tensor&);
using BackwardFn = Six(const at::Tensor&, const std::optional<at::Tensor>&, const at::Tensor&, const at::Tensor&,
                       const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&, const at::Tensor&,
                       const at::Tensor&, const at::Tensor&);

at::Tensor randn(at::IntArrayRef shape) { return at::randn(shape, at::TensorOptions().dtype(at::kDouble)); }

// Values within float64 rounding, and the same memory layout: the composition returns what the fake kernel promises,
// as the CPU kernel does (out and hidden position-major, gradients laid out like their inputs).
void expect_close(const at::Tensor& got, const at::Tensor& want, const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  EXPECT_EQ(got.strides(), want.strides()) << what;
  EXPECT_TRUE(at::allclose(got, want, 1e-10, 1e-12)) << what << ": max difference "
                                                      << (got - want).abs().max().item<double>();
}

// with u_c or not; a (and grad_out) position-major, as the module passes the first hop's output, or contiguous
class CompositionMatchesCpuKernel : public ::testing::TestWithParam<std::tuple<bool, bool>> {};

TEST_P(CompositionMatchesCpuKernel, ForwardAndBackward) {
  const auto [with_u_c, position_major_a] = GetParam();
  at::manual_seed(5);
  // 3 x 23 = 69 positions: the CPU kernel's blocks of 32 span sentences and the last one is part-full
  const int64_t batch = 3, heads = 4, steps = 23, dim = 5, hop = 7, value_dim = with_u_c ? 6 : dim;
  const at::Tensor q = randn({batch, steps, heads, dim}).transpose(1, 2);  // a head view, as the module passes it
  const at::Tensor a =
      position_major_a ? randn({batch, steps, heads, dim}).transpose(1, 2) : randn({batch, heads, steps, dim});
  const at::Tensor w_b = randn({hop, dim}), u_b = randn({heads, hop, dim});
  const std::optional<at::Tensor> u_c = with_u_c ? std::optional<at::Tensor>(randn({heads, value_dim, dim}))
                                                 : std::nullopt;
  const at::Tensor v_b = randn({hop});
  const auto forward =
      c10::Dispatcher::singleton().findSchemaOrThrow("mma_nmt::multihop_second_hop", "").typed<ForwardFn>();
  const auto backward =
      c10::Dispatcher::singleton().findSchemaOrThrow("mma_nmt::multihop_second_hop_backward", "").typed<BackwardFn>();
  const auto [out, gate, hidden] = forward.call(q, a, w_b, u_b, u_c, v_b);
  const auto [out_c, gate_c, hidden_c] =
      mma_nmt::multihop::multihop_second_hop_by_composition(q, a, w_b, u_b, u_c, v_b);
  expect_close(out, out_c, "out");
  expect_close(gate, gate_c, "gate");
  expect_close(hidden, hidden_c, "hidden");
  const at::Tensor grad_out = position_major_a ? randn({batch, steps, heads, value_dim}).transpose(1, 2)
                                               : randn({batch, heads, steps, value_dim});
  const at::Tensor grad_gate = randn({batch, heads, steps});
  for (const bool with_grad_gate : {true, false}) {
    const std::optional<at::Tensor> dgate = with_grad_gate ? std::optional<at::Tensor>(grad_gate) : std::nullopt;
    const auto got = backward.call(grad_out, dgate, q, a, w_b, u_b, u_c, v_b, gate, hidden);
    const auto want = mma_nmt::multihop::multihop_second_hop_backward_by_composition(grad_out, dgate, q, a, w_b, u_b,
                                                                                      u_c, v_b, gate, hidden);
    const std::string when = with_grad_gate ? " (with grad_gate)" : " (without grad_gate)";
    expect_close(std::get<0>(got), std::get<0>(want), "grad_q" + when);
    expect_close(std::get<1>(got), std::get<1>(want), "grad_a" + when);
    expect_close(std::get<2>(got), std::get<2>(want), "grad_w_b" + when);
    expect_close(std::get<3>(got), std::get<3>(want), "grad_u_b" + when);
    expect_close(std::get<4>(got), std::get<4>(want), "grad_u_c" + when);  // both empty without u_c
    expect_close(std::get<5>(got), std::get<5>(want), "grad_v_b" + when);
  }
}

INSTANTIATE_TEST_SUITE_P(ValueProjectionAndLayout, CompositionMatchesCpuKernel,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool()),
                         [](const ::testing::TestParamInfo<std::tuple<bool, bool>>& info) {
                           return std::string(std::get<0>(info.param) ? "WithUc" : "WithoutUc") +
                                  (std::get<1>(info.param) ? "PositionMajorA" : "ContiguousA");
                         });

TEST(SecondHopOp, CompositionTakesAnEmptyBatchAndEmptySentences) {
  for (const auto& [batch, steps] : {std::pair<int64_t, int64_t>{0, 3}, {2, 0}}) {
    const at::Tensor q = randn({batch, 2, steps, 4}), a = randn({batch, 2, steps, 4}), w_b = randn({5, 4});
    const at::Tensor u_b = randn({2, 5, 4}), v_b = randn({5});
    const auto [out, gate, hidden] = mma_nmt::multihop::multihop_second_hop_by_composition(q, a, w_b, u_b, {}, v_b);
    EXPECT_EQ(out.sizes(), q.sizes());
    const auto grads = mma_nmt::multihop::multihop_second_hop_backward_by_composition(
        randn({batch, 2, steps, 4}), std::nullopt, q, a, w_b, u_b, std::nullopt, v_b, gate, hidden);
    EXPECT_EQ(std::get<0>(grads).sizes(), q.sizes());
    EXPECT_EQ(std::get<2>(grads).sizes(), w_b.sizes());
    EXPECT_TRUE(std::get<2>(grads).eq(0).all().item<bool>()) << "no position: zero weight gradients";
  }
}

TEST(SecondHopOp, CompositionChecksItsArguments) {
  const at::Tensor q = randn({2, 3, 4, 5}), a = randn({2, 3, 4, 5}), w_b = randn({6, 5}), v_b = randn({6});
  try {
    mma_nmt::multihop::multihop_second_hop_by_composition(q, a, w_b, randn({2, 6, 5}), std::nullopt, v_b);
    FAIL() << "expected an error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("u_b must have shape [3, 6, 5]"), std::string::npos) << e.what();
  }
}

}  // namespace
