// The CUDA kernels of mma_nmt::multihop_gate (head_gate_kernels.cuh) and mma_nmt::shared_value_attention
// (shared_value_kernels.cuh), forward and backward, under the HIP CPU emulator against the CPU operators, in every
// dtype. Shared-value cases: padding with a length-1 and an empty sentence (fully masked rows), T = 1 and T != S, odd
// head sizes. Head-gate cases: one head, several, rows narrower and wider than a warp, with and without grad_gate.
#include "emulated_testing.h"  // first: torch's headers before HIP's

#include <ATen/core/dispatch/Dispatcher.h>

#include <cmath>
#include <optional>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "luong/cuda/shared_value_kernels.cuh"
#include "multihop/cuda/head_gate_kernels.cuh"

namespace mma_nmt::emulated {
namespace {

using Pair = std::tuple<at::Tensor, at::Tensor>;
using Triple = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

std::optional<at::Tensor> lengths_of(const std::vector<int64_t>& lengths) {
  return lengths.empty() ? std::nullopt : std::optional<at::Tensor>(at::tensor(lengths));
}

// ---- multi-hop head gate ----

struct HeadGateCase {
  std::string name;
  int64_t batch, heads, query_len, hop_dim, value_dim;
};

void PrintTo(const HeadGateCase& c, std::ostream* os) { *os << c.name; }

// One warp per position, lanes over Db and Dc: rows narrower than a warp (most lanes idle), and rows of several lane
// slices with a part-full last one (Db 70 = 32 + 32 + 6, Dc 45 = 32 + 13).
const HeadGateCase kHeadGateCases[] = {
    {"OneHead", 2, 1, 3, 5, 4},
    {"EightHeadsManyPositions", 3, 8, 50, 7, 3},
    {"SingleStep", 4, 3, 1, 9, 6},
    {"RowsWiderThanAWarp", 2, 5, 7, 70, 45},
};

using GateFn = Pair(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&);
using GateBackwardFn = Triple(const at::Tensor&, const std::optional<at::Tensor>&, const at::Tensor&,
                              const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&);

class EmulatedHeadGate : public ::testing::TestWithParam<std::tuple<HeadGateCase, DtypeCase>> {};

TEST_P(EmulatedHeadGate, ForwardAndBackwardMatchCpuOperator) {
  const auto& [c, dtype] = GetParam();
  at::manual_seed(17);
  const at::Tensor query_proj = random_input({c.batch, c.heads, c.query_len, c.hop_dim}, dtype);
  const at::Tensor head_proj = random_input({c.batch, c.heads, c.query_len, c.hop_dim}, dtype);
  const at::Tensor value_proj = random_input({c.batch, c.heads, c.query_len, c.value_dim}, dtype);
  const at::Tensor v_b = random_input({c.hop_dim}, dtype);
  const at::Tensor grad_out = random_input({c.batch, c.heads, c.query_len, c.value_dim}, dtype);
  const at::Tensor grad_gate = random_input({c.batch, c.heads, c.query_len}, dtype);
  const at::ScalarType rt = dtype.reference_dtype;
  const char* op = "emulated multihop_gate";

  const auto forward = c10::Dispatcher::singleton().findSchemaOrThrow("mma_nmt::multihop_gate", "").typed<GateFn>();
  const auto [out, gate] = forward.call(query_proj.to(rt), head_proj.to(rt), value_proj.to(rt), v_b.to(rt));
  const multihop::HeadGateParams p = multihop::check_head_gate_args(op, query_proj, head_proj, value_proj, v_b);
  const auto [emu_out, emu_gate] =
      multihop::cuda::run_head_gate_forward(p, query_proj, head_proj, value_proj, v_b, emulated_launch());
  expect_close(emu_out, out, dtype, "multihop_gate_forward", "out");
  expect_close(emu_gate, gate, dtype, "multihop_gate_forward", "gate");

  const auto backward =
      c10::Dispatcher::singleton().findSchemaOrThrow("mma_nmt::multihop_gate_backward", "").typed<GateBackwardFn>();
  for (const bool with_grad_gate : {true, false}) {
    const std::string when = with_grad_gate ? " (with grad_gate)" : " (without grad_gate)";
    const std::optional<at::Tensor> dgate = with_grad_gate ? std::optional<at::Tensor>(grad_gate) : std::nullopt;
    const std::optional<at::Tensor> dgate_ref = with_grad_gate ? std::optional<at::Tensor>(grad_gate.to(rt))
                                                               : std::nullopt;
    const auto [grad_pre, grad_value, grad_v_b] = backward.call(grad_out.to(rt), dgate_ref, query_proj.to(rt),
                                                                head_proj.to(rt), value_proj.to(rt), v_b.to(rt), gate);
    const auto [emu_pre, emu_value, emu_v_b] = multihop::cuda::run_head_gate_backward(
        p, grad_out, dgate, query_proj, head_proj, value_proj, v_b, gate.to(dtype.dtype), emulated_launch());
    expect_close(emu_pre, grad_pre, dtype, "multihop_gate_backward", "grad_pre" + when);
    expect_close(emu_value, grad_value, dtype, "multihop_gate_backward", "grad_value_proj" + when);
    expect_close(emu_v_b, grad_v_b, dtype, "multihop_gate_backward", "grad_v_b" + when);
  }
}

TEST(EmulatedHeadGateLayouts, HeadViewsOfProjectionsGoInAsTheyAreAndResultsComeOutPositionMajor) {
  // The module hands the gate head views of its projections (query and head projections fused here, as one
  // (B, T, 2 H Db) tensor) and merges out's heads with a view: the kernels address every (B, H, T, dim) tensor
  // through its strides. The same values contiguous give the same results bit for bit.
  at::manual_seed(19);
  const int64_t batch = 2, heads = 3, query_len = 5, hop_dim = 37, value_dim = 11;
  const at::Tensor query_proj = at::randn({batch, heads, query_len, hop_dim});
  const at::Tensor head_proj = at::randn({batch, heads, query_len, hop_dim});
  const at::Tensor value_proj = at::randn({batch, heads, query_len, value_dim}), v_b = at::randn({hop_dim});
  const at::Tensor grad_out = at::randn({batch, heads, query_len, value_dim});
  const at::Tensor grad_gate = at::randn({batch, heads, query_len});
  const at::Tensor query_view = head_view(query_proj, 2, 0), head_view_ = head_view(head_proj, 2, 1);
  const at::Tensor value_view = head_view(value_proj, 1, 0), grad_view = head_view(grad_out, 1, 0);
  const multihop::HeadGateParams p =
      multihop::check_head_gate_args("emulated multihop_gate", query_proj, head_proj, value_proj, v_b);
  const auto [out, gate] =
      multihop::cuda::run_head_gate_forward(p, query_proj, head_proj, value_proj, v_b, emulated_launch());
  const auto [view_out, view_gate] =
      multihop::cuda::run_head_gate_forward(p, query_view, head_view_, value_view, v_b, emulated_launch());
  EXPECT_TRUE(is_position_major(out) && is_position_major(view_out)) << out.strides();
  EXPECT_TRUE(at::equal(view_out, out));
  EXPECT_TRUE(at::equal(view_gate, gate));
  const auto [grad_pre, grad_value, grad_v_b] = multihop::cuda::run_head_gate_backward(
      p, grad_out, grad_gate, query_proj, head_proj, value_proj, v_b, gate, emulated_launch());
  const auto [view_pre, view_value, view_v_b] = multihop::cuda::run_head_gate_backward(
      p, grad_view, grad_gate, query_view, head_view_, value_view, v_b, view_gate, emulated_launch());
  EXPECT_TRUE(at::equal(view_pre, grad_pre));
  EXPECT_TRUE(at::equal(view_value, grad_value));
  EXPECT_TRUE(at::equal(view_v_b, grad_v_b));
  EXPECT_TRUE(grad_pre.is_contiguous() && grad_value.is_contiguous());  // laid out like their inputs
  EXPECT_TRUE(is_position_major(view_pre)) << view_pre.strides();       // query_proj's view is not dense: its order
  EXPECT_EQ(view_value.strides(), value_view.strides());
}

INSTANTIATE_TEST_SUITE_P(Cases, EmulatedHeadGate,
                         ::testing::Combine(::testing::ValuesIn(kHeadGateCases), ::testing::ValuesIn(kAllDtypes)),
                         [](const ::testing::TestParamInfo<std::tuple<HeadGateCase, DtypeCase>>& info) {
                           return std::get<0>(info.param).name + "_" + dtype_name(std::get<1>(info.param).dtype);
                         });

// ---- shared-value (multi-head Luong) attention ----

struct SharedValueCase {
  std::string name;
  int64_t batch, heads, query_len, key_len, head_dim, value_dim;
  std::vector<int64_t> key_lengths;  // empty: no padding
};

void PrintTo(const SharedValueCase& c, std::ostream* os) { *os << c.name; }

const SharedValueCase kSharedValueCases[] = {
    {"LengthOneAndEmptySentence", 3, 2, 4, 6, 5, 3, {6, 1, 0}},
    {"TNotSMoreKeysThanThreads", 2, 3, 3, 150, 9, 7, {150, 77}},
    {"SingleQueryStep", 2, 4, 1, 7, 8, 131, {}},
};

using SharedValueFn = Triple(const at::Tensor&, const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
                             double, bool);
using SharedValueBackwardFn = Triple(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                     const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&, double);

constexpr double kScale = 0.35;

class EmulatedSharedValue : public ::testing::TestWithParam<std::tuple<SharedValueCase, DtypeCase>> {};

TEST_P(EmulatedSharedValue, ForwardAndBackwardMatchCpuOperator) {
  const auto& [c, dtype] = GetParam();
  at::manual_seed(23);
  const at::Tensor q = random_input({c.batch, c.heads, c.query_len, c.head_dim}, dtype);
  const at::Tensor k = random_input({c.batch, c.heads, c.key_len, c.head_dim}, dtype);
  const at::Tensor v = random_input({c.batch, c.key_len, c.value_dim}, dtype);
  const at::Tensor grad_out = random_input({c.batch, c.heads, c.query_len, c.value_dim}, dtype);
  const std::optional<at::Tensor> lengths = lengths_of(c.key_lengths);
  const at::ScalarType rt = dtype.reference_dtype;

  const auto forward =
      c10::Dispatcher::singleton().findSchemaOrThrow("mma_nmt::shared_value_attention", "").typed<SharedValueFn>();
  const auto [out, lse, probs] = forward.call(q.to(rt), k.to(rt), v.to(rt), lengths, kScale, true);
  const luong::SharedValueParams p =
      luong::check_shared_value_args("emulated shared_value_attention", q, k, v, lengths, kScale);
  const auto [emu_out, emu_lse, emu_probs] =
      luong::cuda::run_shared_value_forward(p, q, k, v, lengths, true, emulated_launch());
  expect_close(emu_out, out, dtype, "shared_value_forward", "out");
  expect_close(emu_lse, lse, dtype, "shared_value_forward", "lse");
  expect_close(emu_probs, probs, dtype, "shared_value_forward", "probs");
  // Without weights the outputs are allocated uninitialised: the kernel must write every row (a keyless one too).
  const auto [bare_out, bare_lse, no_probs] =
      luong::cuda::run_shared_value_forward(p, q, k, v, lengths, false, emulated_launch());
  expect_close(bare_out, out, dtype, "shared_value_forward", "out without weights");
  expect_close(bare_lse, lse, dtype, "shared_value_forward", "lse without weights");

  const auto backward = c10::Dispatcher::singleton()
                            .findSchemaOrThrow("mma_nmt::shared_value_attention_backward", "")
                            .typed<SharedValueBackwardFn>();
  const auto [grad_q, grad_k, grad_v] =
      backward.call(grad_out.to(rt), q.to(rt), k.to(rt), v.to(rt), out, lse, lengths, kScale);
  const auto [emu_grad_q, emu_grad_k, emu_grad_v] = luong::cuda::run_shared_value_backward(
      p, grad_out, q, k, v, out.to(dtype.dtype), lse, lengths, emulated_launch());
  expect_close(emu_grad_q, grad_q, dtype, "shared_value_backward", "grad_q");
  expect_close(emu_grad_k, grad_k, dtype, "shared_value_backward", "grad_k");
  expect_close(emu_grad_v, grad_v, dtype, "shared_value_backward", "grad_v");
}

TEST(EmulatedSharedValueBackward, OneKeySentenceGetsExactZerosAndPaddingStaysUnread) {
  // Sentence 1 has one key: every row puts its whole weight on it (out = v_0), so its query and key gradients are
  // exactly 0, as plain PyTorch's are; the first pass sums dO . O and dO . v_0 alike. Sentence 0's padding keys and
  // values hold NaN, which must not reach any gradient (they are never read), and get zero gradients.
  at::manual_seed(29);
  const int64_t batch = 2, heads = 3, query_len = 4, key_len = 9, dim = 40, value_dim = 70;
  const at::Tensor q = at::randn({batch, heads, query_len, dim});
  const at::Tensor grad_out = at::randn({batch, heads, query_len, value_dim});
  at::Tensor k = at::randn({batch, heads, key_len, dim}), v = at::randn({batch, key_len, value_dim});
  const at::Tensor lengths = at::tensor(std::vector<int64_t>{6, 1});
  k.select(0, 0).narrow(1, 6, 3).fill_(std::nan(""));
  v.select(0, 0).narrow(0, 6, 3).fill_(std::nan(""));
  const luong::SharedValueParams p =
      luong::check_shared_value_args("emulated shared_value_attention", q, k, v, lengths, kScale);
  const auto [out, lse, probs] = luong::cuda::run_shared_value_forward(p, q, k, v, lengths, false, emulated_launch());
  const auto [grad_q, grad_k, grad_v] =
      luong::cuda::run_shared_value_backward(p, grad_out, q, k, v, out, lse, lengths, emulated_launch());
  EXPECT_EQ(at::count_nonzero(grad_q[1]).item<int64_t>(), 0) << grad_q[1].abs().max();
  EXPECT_EQ(at::count_nonzero(grad_k[1]).item<int64_t>(), 0) << grad_k[1].abs().max();
  EXPECT_GT(at::count_nonzero(grad_v[1][0]).item<int64_t>(), 0);  // the key's value keeps its gradient
  for (const at::Tensor& g : {grad_q, grad_k, grad_v}) EXPECT_TRUE(at::isfinite(g).all().item<bool>());
  EXPECT_EQ(at::count_nonzero(grad_k[0].narrow(1, 6, 3)).item<int64_t>(), 0);
  EXPECT_EQ(at::count_nonzero(grad_v[0].narrow(0, 6, 3)).item<int64_t>(), 0);
}

INSTANTIATE_TEST_SUITE_P(Cases, EmulatedSharedValue,
                         ::testing::Combine(::testing::ValuesIn(kSharedValueCases), ::testing::ValuesIn(kAllDtypes)),
                         [](const ::testing::TestParamInfo<std::tuple<SharedValueCase, DtypeCase>>& info) {
                           return std::get<0>(info.param).name + "_" + dtype_name(std::get<1>(info.param).dtype);
                         });

}  // namespace
}  // namespace mma_nmt::emulated
