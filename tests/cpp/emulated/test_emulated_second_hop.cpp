// mma_nmt::multihop_second_hop's CUDA implementation (second_hop_launch.cuh: GEMMs around the head-gate kernels, the
// forward kernel writing the saved hidden layer, the backward kernel reading it) under the HIP CPU emulator against
// the CPU operator, in every dtype: with and without u_c, a (and grad_out) position-major as the module passes the
// first hop's output or contiguous, with and without grad_gate; an empty batch and empty sentences; and the ATen work
// around the kernels (issue 49, point 6).
#include "emulated_testing.h"  // first: torch's headers before HIP's

#include <ATen/core/dispatch/Dispatcher.h>

#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>
#include <algorithm>

#include "../dispatch_budget.h"
#include "multihop/cuda/second_hop_launch.cuh"

namespace mma_nmt::emulated {
namespace {

using Triple = std::tuple<at::Tensor, at::Tensor, at::Tensor>;
using Six = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;
using ForwardFn = Triple(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                         const std::optional<at::Tensor>&, const at::Tensor&);
using BackwardFn = Six(const at::Tensor&, const std::optional<at::Tensor>&, const at::Tensor&, const at::Tensor&,
                       const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&, const at::Tensor&,
                       const at::Tensor&, const at::Tensor&);

std::optional<at::Tensor> optional_to(const std::optional<at::Tensor>& t, at::ScalarType dtype) {
  return t.has_value() ? std::optional<at::Tensor>(t->to(dtype)) : std::nullopt;
}

// One call's inputs in the dtype under test: q a head view (B, T, H, D) in memory, as the module passes it; a
// position-major or contiguous.
struct SecondHopInputs {
  at::Tensor q, a, w_b, u_b, v_b, grad_out, grad_gate;
  std::optional<at::Tensor> u_c;
};

SecondHopInputs random_inputs(int64_t batch, int64_t heads, int64_t steps, int64_t dim, int64_t hop, bool with_u_c,
                              bool position_major_a, const DtypeCase& dtype) {
  const int64_t value_dim = with_u_c ? 6 : dim;
  const auto rows = [&](int64_t width, bool position_major) {
    return position_major ? random_input({batch, steps, heads, width}, dtype).transpose(1, 2)
                          : random_input({batch, heads, steps, width}, dtype);
  };
  SecondHopInputs in;
  in.q = rows(dim, true);
  in.a = rows(dim, position_major_a);
  in.w_b = random_input({hop, dim}, dtype);
  in.u_b = random_input({heads, hop, dim}, dtype);
  if (with_u_c) in.u_c = random_input({heads, value_dim, dim}, dtype);
  in.v_b = random_input({hop}, dtype);
  in.grad_out = rows(value_dim, position_major_a);
  in.grad_gate = random_input({batch, heads, steps}, dtype);
  return in;
}

const char* const kGradients[] = {"grad_q", "grad_a", "grad_w_b", "grad_u_b", "grad_u_c", "grad_v_b"};

template <typename Tuple, size_t... I>
std::vector<at::Tensor> as_vector(const Tuple& tuple, std::index_sequence<I...>) {
  return {std::get<I>(tuple)...};
}

// The backward of SPEC section 4's formula in plain ATen ops, in the inputs' dtype, from the forward's saved gate and
// hidden layer: what plain PyTorch computes in half precision, every intermediate rounded to the dtype.
std::vector<at::Tensor> plain_backward(const SecondHopInputs& in, const std::optional<at::Tensor>& grad_gate,
                                       const at::Tensor& gate, const at::Tensor& hidden) {
  const at::Tensor value = in.u_c.has_value() ? at::einsum("bhtd,hcd->bhtc", {in.a, *in.u_c}) : in.a;
  at::Tensor grad_beta = (in.grad_out * value).sum(-1);                                   // (B, H, T)
  if (grad_gate.has_value()) grad_beta = grad_beta + *grad_gate;
  const at::Tensor de = gate * (grad_beta - (gate * grad_beta).sum(1, /*keepdim=*/true));  // softmax over heads
  const at::Tensor grad_pre = de.unsqueeze(-1) * in.v_b * (1 - hidden * hidden);          // (B, H, T, Db)
  const at::Tensor grad_value = gate.unsqueeze(-1) * in.grad_out;                         // (B, H, T, Dc)
  at::Tensor grad_a = at::einsum("bhtp,hpd->bhtd", {grad_pre, in.u_b});
  grad_a = grad_a + (in.u_c.has_value() ? at::einsum("bhtc,hcd->bhtd", {grad_value, *in.u_c}) : grad_value);
  return {at::einsum("bhtp,pd->bhtd", {grad_pre, in.w_b}), grad_a, at::einsum("bhtp,bhtd->pd", {grad_pre, in.q}),
          at::einsum("bhtp,bhtd->hpd", {grad_pre, in.a}),
          in.u_c.has_value() ? at::einsum("bhtc,bhtd->hcd", {grad_value, in.a}) : at::empty({0}, in.q.options()),
          (de.unsqueeze(-1) * hidden).sum({0, 1, 2})};
}

// dtype x (with u_c or not) x (a position-major or contiguous)
class EmulatedSecondHop : public ::testing::TestWithParam<std::tuple<DtypeCase, bool, bool>> {};

TEST_P(EmulatedSecondHop, ForwardAndBackwardMatchCpuOperator) {
  const auto& [dtype, with_u_c, position_major_a] = GetParam();
  at::manual_seed(5);
  // 3 x 23 = 69 positions; Db 37 = 32 + 5 lanes' worth
  const SecondHopInputs in = random_inputs(3, 4, 23, 5, 37, with_u_c, position_major_a, dtype);
  const at::ScalarType rt = dtype.reference_dtype;
  const auto forward =
      c10::Dispatcher::singleton().findSchemaOrThrow("mma_nmt::multihop_second_hop", "").typed<ForwardFn>();
  const auto backward =
      c10::Dispatcher::singleton().findSchemaOrThrow("mma_nmt::multihop_second_hop_backward", "").typed<BackwardFn>();
  const auto [out, gate, hidden] =
      forward.call(in.q.to(rt), in.a.to(rt), in.w_b.to(rt), in.u_b.to(rt), optional_to(in.u_c, rt), in.v_b.to(rt));
  const multihop::SecondHopParams p =
      multihop::check_second_hop_args("emulated second hop", in.q, in.a, in.w_b, in.u_b, in.u_c, in.v_b);
  const auto [emu_out, emu_gate, emu_hidden] =
      multihop::cuda::run_second_hop_forward(p, in.q, in.a, in.w_b, in.u_b, in.u_c, in.v_b, emulated_launch());
  expect_close(emu_out, out, dtype, "second_hop_forward", "out");
  expect_close(emu_gate, gate, dtype, "second_hop_forward", "gate");
  expect_close(emu_hidden, hidden, dtype, "second_hop_forward", "hidden");
  // the layouts the fake kernel promises: out and hidden position-major
  EXPECT_TRUE(is_position_major(emu_out) && is_position_major(emu_hidden)) << emu_out.strides();
  for (const bool with_grad_gate : {true, false}) {
    const std::string when = with_grad_gate ? " (with grad_gate)" : " (without grad_gate)";
    const std::optional<at::Tensor> dgate = with_grad_gate ? std::optional<at::Tensor>(in.grad_gate) : std::nullopt;
    // Both backwards read the gate and hidden layer the emulated forward saved (in the dtype under test, as the
    // operator's outputs are): the saved values' rounding is the forward's, compared above.
    const auto want = as_vector(backward.call(in.grad_out.to(rt), optional_to(dgate, rt), in.q.to(rt), in.a.to(rt),
                                              in.w_b.to(rt), in.u_b.to(rt), optional_to(in.u_c, rt), in.v_b.to(rt),
                                              emu_gate.to(rt), emu_hidden.to(rt)),
                                std::make_index_sequence<6>());
    const auto got = as_vector(
        multihop::cuda::run_second_hop_backward(p, in.grad_out, dgate, in.q, in.a, in.w_b, in.u_b, in.u_c, in.v_b,
                                                emu_gate, emu_hidden, emulated_launch()),
        std::make_index_sequence<6>());
    if (dtype.dtype == at::kFloat || dtype.dtype == at::kDouble) {
      for (size_t i = 0; i < got.size(); ++i) {
        expect_close(got[i], want[i], dtype, "second_hop_backward", kGradients[i] + when);
      }
    } else {
      // In half precision the GEMMs take their operands in the dtype (the value projection, grad_pre and
      // grad_value rounded once each, as plain PyTorch rounds them), where the CPU operator keeps them in float: the
      // CUDA suite's rule, the error against float64 at most twice plain PyTorch's in the same dtype.
      const auto plain = plain_backward(in, dgate, emu_gate, emu_hidden);
      for (size_t i = 0; i < got.size(); ++i) {
        const double error = scaled_max_error(got[i], want[i]), plain_error = scaled_max_error(plain[i], want[i]);
        EXPECT_LE(error, std::max(dtype.tolerance, 2 * plain_error))
            << "second_hop_backward " << dtype_name(dtype.dtype) << " " << kGradients[i] << when << ": " << error
            << " from the float32 CPU operator, plain PyTorch in the same dtype " << plain_error;
      }
    }
    EXPECT_EQ(got[0].strides(), in.q.strides()) << "grad_q laid out like q";
    EXPECT_EQ(got[1].strides(), in.a.strides()) << "grad_a laid out like a";
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, EmulatedSecondHop,
                         ::testing::Combine(::testing::ValuesIn(kAllDtypes), ::testing::Bool(), ::testing::Bool()),
                         [](const ::testing::TestParamInfo<std::tuple<DtypeCase, bool, bool>>& info) {
                           return dtype_name(std::get<0>(info.param).dtype) +
                                  (std::get<1>(info.param) ? "_WithUc" : "_WithoutUc") +
                                  (std::get<2>(info.param) ? "_PositionMajorA" : "_ContiguousA");
                         });

TEST(EmulatedSecondHopEdges, AnEmptyBatchAndEmptySentences) {
  for (const auto& [batch, steps] : {std::pair<int64_t, int64_t>{0, 3}, {2, 0}}) {
    const SecondHopInputs in = random_inputs(batch, 2, steps, 4, 5, false, true, kFloat64);
    const multihop::SecondHopParams p =
        multihop::check_second_hop_args("emulated second hop", in.q, in.a, in.w_b, in.u_b, in.u_c, in.v_b);
    const auto [out, gate, hidden] =
        multihop::cuda::run_second_hop_forward(p, in.q, in.a, in.w_b, in.u_b, in.u_c, in.v_b, emulated_launch());
    EXPECT_EQ(out.sizes(), in.q.sizes());
    const auto grads = multihop::cuda::run_second_hop_backward(p, in.grad_out, std::nullopt, in.q, in.a, in.w_b,
                                                               in.u_b, in.u_c, in.v_b, gate, hidden, emulated_launch());
    EXPECT_EQ(std::get<0>(grads).sizes(), in.q.sizes());
    EXPECT_EQ(std::get<2>(grads).sizes(), in.w_b.sizes());
    EXPECT_TRUE(std::get<2>(grads).eq(0).all().item<bool>()) << "no position: zero weight gradients";
    EXPECT_TRUE(std::get<5>(grads).eq(0).all().item<bool>()) << "no position: zero grad_v_b";
  }
}

// The ATen work around the kernels, counted as test_dispatch_budget.cpp counts (allocations and views are free), with
// the module's layouts (q a head view, a the first hop's position-major output, grad_out the merged heads'
// gradient). Forward: the three projection GEMMs and nothing else (the kernel writes the hidden layer; until
// 2026-11-30 an add and a tanh did: 6 ops). Backward: the value projection again and the gradients' five GEMMs
// (4 bmm, 2 mm; grad_a's second product accumulates in a baddbmm_, which on the CPU copies into its strided result,
// the copy_, where cuBLAS writes in place), and the fill_ of grad_v_b's sum over positions; the two pre-activation
// products are no longer recomputed (the kernel reads the hidden layer; until 2026-11-30: 10 ops beside the gate's
// own sum).
TEST(EmulatedSecondHopLaunches, TheGemmsAroundTheGateKernelsAndNothingElse) {
  at::manual_seed(13);
  const SecondHopInputs in = random_inputs(2, 4, 8, 4, 6, true, true, kFloat32);
  const multihop::SecondHopParams p =
      multihop::check_second_hop_args("emulated second hop", in.q, in.a, in.w_b, in.u_b, in.u_c, in.v_b);
  testing::DispatchCount forward, backward;
  std::optional<Triple> outputs;
  {
    testing::DispatchCounter counter(forward, 1 << 30);
    outputs = multihop::cuda::run_second_hop_forward(p, in.q, in.a, in.w_b, in.u_b, in.u_c, in.v_b, emulated_launch());
  }
  const auto& [out, gate, hidden] = *outputs;
  {
    testing::DispatchCounter counter(backward, 1 << 30);
    (void)multihop::cuda::run_second_hop_backward(p, in.grad_out, in.grad_gate, in.q, in.a, in.w_b, in.u_b, in.u_c,
                                                  in.v_b, gate, hidden, emulated_launch());
  }
  const std::map<std::string, int64_t> gemms{{"aten::bmm", 2}, {"aten::mm", 1}};
  EXPECT_EQ(forward.by_name, gemms) << forward.ops << " ops";
  const std::map<std::string, int64_t> backward_ops{
      {"aten::bmm", 4}, {"aten::mm", 2}, {"aten::copy_", 1}, {"aten::fill_", 1}};
  EXPECT_EQ(backward.by_name, backward_ops) << backward.ops << " ops";
}

}  // namespace
}  // namespace mma_nmt::emulated
