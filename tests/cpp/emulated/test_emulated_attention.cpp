// The CUDA kernels of mma_nmt::attention (attention_forward_kernel.cuh, attention_backward_kernel.cuh) run under the HIP
// CPU emulator and compared with the CPU operator: every head kind, padding with a length-1 and an empty sentence
// (fully masked rows), T = 1 and T != S, a query offset, odd and wide head sizes, dropout, and all four dtypes; the
// warp-per-row kernels and the tiled ones (attention_tile_kernels.cuh), the latter in blocks of 1 and 4 warps.
#include "emulated_testing.h"  // first: torch's headers before HIP's

#include <ATen/Context.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "../attention_op_types.h"
#include "../dispatch_budget.h"
#include "attention/cuda/attention_backward_kernel.cuh"
#include "attention/cuda/attention_forward_kernel.cuh"
#include "attention/head_mask.h"

namespace mma_nmt::emulated {
namespace {

using attention::kBackward;
using attention::kCausal;
using attention::kForward;
using attention::kGlobal;
using attention::kLocal;
using Triple = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

struct AttentionCase {
  std::string name;
  int64_t batch, query_len, key_len, head_dim, value_dim;
  std::vector<int64_t> head_kinds;
  std::vector<int64_t> key_lengths;  // empty: no padding
  int64_t window = 1;
  int64_t query_offset = 0;
  double dropout_p = 0.0;
};

// gtest prints a failing case by its name.
void PrintTo(const AttentionCase& c, std::ostream* os) { *os << c.name; }

const AttentionCase kCases[] = {
    // every kind; sentence 1 has one key (its F, L rows past it are fully masked), sentence 2 none (all masked)
    {"AllKindsLengthOneAndEmptySentence", 3, 6, 6, 5, 3, {kGlobal, kLocal, kForward, kBackward, kCausal}, {6, 1, 0}},
    {"CrossAttentionTNotS", 2, 5, 9, 33, 65, {kGlobal, kGlobal}, {9, 4}},
    // one decoder step at position 6: the local head of the 3-key sentence sees no key
    {"SingleQueryStepWithOffset", 2, 1, 7, 8, 8, {kCausal, kLocal, kGlobal}, {7, 3}, 2, 6},
    {"WideHeadsEightValuesPerLane", 1, 4, 4, 130, 72, {kBackward, kForward}, {}},
    {"Dropout", 2, 4, 5, 7, 6, {kGlobal, kLocal}, {5, 2}, 1, 0, 0.3},
    // several tiles of rows and of keys (8-row tiles at 1 warp, 32 at 4): hulls, tile edges and visible_queries
    {"LongPaddedAllKindsManyTiles", 3, 37, 37, 16, 12, {kGlobal, kLocal, kForward, kBackward, kCausal}, {37, 20, 1}, 3},
    {"QueriesOffsetIntoLongerKeys", 2, 19, 45, 9, 17, {kLocal, kCausal, kForward}, {45, 30}, 2, 26},
    {"DropoutAcrossTiles", 2, 21, 27, 8, 8, {kGlobal, kLocal, kBackward}, {27, 13}, 2, 0, 0.25},
};

using mma_nmt::testing::AttentionBackwardFn;
using mma_nmt::testing::AttentionFn;

constexpr double kScale = 0.4;
constexpr int64_t kSeed = 1234;

class EmulatedAttention : public ::testing::TestWithParam<std::tuple<AttentionCase, DtypeCase>> {};

TEST_P(EmulatedAttention, ForwardAndBackwardMatchCpuOperator) {
  const auto& [c, dtype] = GetParam();
  at::manual_seed(7);
  const int64_t heads = static_cast<int64_t>(c.head_kinds.size());
  const at::Tensor q = random_input({c.batch, heads, c.query_len, c.head_dim}, dtype);
  const at::Tensor k = random_input({c.batch, heads, c.key_len, c.head_dim}, dtype);
  const at::Tensor v = random_input({c.batch, heads, c.key_len, c.value_dim}, dtype);
  const at::Tensor grad_out = random_input({c.batch, heads, c.query_len, c.value_dim}, dtype);
  const std::optional<at::Tensor> lengths =
      c.key_lengths.empty() ? std::nullopt : std::optional<at::Tensor>(at::tensor(c.key_lengths));
  const auto ref = [&](const at::Tensor& x) { return x.to(dtype.reference_dtype); };

  const auto forward = c10::Dispatcher::singleton().findSchemaOrThrow("mma_nmt::attention", "").typed<AttentionFn>();
  const auto [out, lse, probs] = forward.call(ref(q), ref(k), ref(v), lengths, c.head_kinds, c.window, kScale,
                                              c.query_offset, c.dropout_p, kSeed, true, false);
  const attention::AttentionParams p = attention::check_attention_args(
      "emulated attention", q, k, v, lengths, c.head_kinds, c.window, kScale, c.query_offset, c.dropout_p, kSeed);
  const auto backward =
      c10::Dispatcher::singleton().findSchemaOrThrow("mma_nmt::attention_backward", "").typed<AttentionBackwardFn>();
  const auto [grad_q, grad_k, grad_v] =
      backward.call(ref(grad_out), ref(q), ref(k), ref(v), out, lse, lengths, c.head_kinds, c.window, kScale,
                    c.query_offset, c.dropout_p, kSeed, false);

  // The warp-per-row kernels (with weights), then the tiled ones where they serve the case (no weights), in blocks of
  // 1 warp (8-row tiles), 3 (24: the float32 tile of heads of 128) and 4 warps (32-row tiles, as on the GPU).
  using attention::cuda::AttentionKernelSet;
  const auto [emu_out, emu_lse, emu_probs] = attention::cuda::run_attention_forward(
      p, q, k, v, lengths, true, emulated_launch(), AttentionKernelSet::kRowWarps);
  expect_close(emu_out, out, dtype, "attention_forward", "out");
  expect_close(emu_lse, lse, dtype, "attention_forward", "lse");
  expect_close(emu_probs, probs, dtype, "attention_forward", "probs");
  const auto [emu_grad_q, emu_grad_k, emu_grad_v] = attention::cuda::run_attention_backward(
      p, grad_out, q, k, v, out.to(dtype.dtype), lse, lengths, emulated_launch(), AttentionKernelSet::kRowWarps);
  expect_close(emu_grad_q, grad_q, dtype, "attention_backward", "grad_q");
  expect_close(emu_grad_k, grad_k, dtype, "attention_backward", "grad_k");
  expect_close(emu_grad_v, grad_v, dtype, "attention_backward", "grad_v");

  if (std::max(c.head_dim, c.value_dim) > attention::cuda::kTileMaxHeadDim) {
    EXPECT_THROW(attention::cuda::run_attention_forward(p, q, k, v, lengths, false, emulated_launch(),
                                                        AttentionKernelSet::kTiles),
                 c10::Error);
    return;
  }
  for (const int warps : {1, 3, 4}) {
    SCOPED_TRACE("tiled kernels, warps per block " + std::to_string(warps));
    const gpu::Launch launch{nullptr, warps};
    const auto [tile_out, tile_lse, no_probs] =
        attention::cuda::run_attention_forward(p, q, k, v, lengths, false, launch, AttentionKernelSet::kTiles);
    expect_close(tile_out, out, dtype, "attention_tile_forward", "out");
    expect_close(tile_lse, lse, dtype, "attention_tile_forward", "lse");
    const auto [tile_grad_q, tile_grad_k, tile_grad_v] = attention::cuda::run_attention_backward(
        p, grad_out, q, k, v, out.to(dtype.dtype), lse, lengths, launch, AttentionKernelSet::kTiles);
    expect_close(tile_grad_q, grad_q, dtype, "attention_tile_backward", "grad_q");
    expect_close(tile_grad_k, grad_k, dtype, "attention_tile_backward", "grad_k");
    expect_close(tile_grad_v, grad_v, dtype, "attention_tile_backward", "grad_v");
  }
}

TEST(EmulatedAttentionTiles, WeightsAndDecodingStepsStayWithTheWarpKernelsAndAutoPicksTheTilesOtherwise) {
  at::manual_seed(5);
  const at::Tensor q = at::randn({1, 2, 9, 8}), k = at::randn({1, 2, 11, 8}), v = at::randn({1, 2, 11, 8});
  const std::vector<int64_t> kinds{kGlobal, kLocal};
  const attention::AttentionParams p =
      attention::check_attention_args("emulated attention", q, k, v, std::nullopt, kinds, 1, 0.5, 0, 0.0, 0);
  using attention::cuda::AttentionKernelSet;
  EXPECT_THROW(attention::cuda::run_attention_forward(p, q, k, v, std::nullopt, true, emulated_launch(),
                                                      AttentionKernelSet::kTiles),
               c10::Error);
  const gpu::Launch four_warps{nullptr, 4};
  EXPECT_EQ(attention::cuda::tile_warps_for<float>(p, four_warps, false, false, AttentionKernelSet::kAuto), 4);
  EXPECT_EQ(attention::cuda::tile_warps_for<float>(p, four_warps, false, true, AttentionKernelSet::kAuto), 0);
  // Backward: the warp kernel up to kRowBackwardMaxKeys keys (the faster one there on an H200), the tiles past it.
  EXPECT_EQ(attention::cuda::tile_warps_for<float>(p, four_warps, true, false, AttentionKernelSet::kAuto), 0);
  EXPECT_EQ(attention::cuda::tile_warps_for<float>(p, four_warps, true, false, AttentionKernelSet::kTiles), 4);
  attention::AttentionParams long_keys = p;
  long_keys.key_len = attention::cuda::kRowBackwardMaxKeys + 1;
  EXPECT_EQ(attention::cuda::tile_warps_for<float>(long_keys, four_warps, true, false, AttentionKernelSet::kAuto), 4);
  attention::AttentionParams step = p;  // an incremental decoding step: one query row
  step.query_len = 1;
  EXPECT_EQ(attention::cuda::tile_warps_for<float>(step, four_warps, false, false, AttentionKernelSet::kAuto), 0);
  EXPECT_EQ(attention::cuda::tile_warps_for<float>(step, four_warps, false, false, AttentionKernelSet::kTiles), 4);
  // Shared memory decides the tile: float32 heads of 128 take 16-row tiles (2 warps) in backward, 24 (3) in forward;
  // bfloat16 ones 32 in both.
  attention::AttentionParams wide = p;
  wide.head_dim = wide.value_dim = 128;
  EXPECT_EQ(attention::cuda::tile_warps_for<float>(wide, four_warps, true, false, AttentionKernelSet::kTiles), 2);
  EXPECT_EQ(attention::cuda::tile_warps_for<float>(wide, four_warps, false, false, AttentionKernelSet::kAuto), 3);
  EXPECT_EQ(attention::cuda::tile_warps_for<at::BFloat16>(wide, four_warps, true, false, AttentionKernelSet::kTiles),
            4);
  // The tiled kernels' outputs are the warp kernels' (auto takes the tiles here).
  const auto [out, lse, probs] = attention::cuda::run_attention_forward(
      p, q, k, v, std::nullopt, false, emulated_launch(), AttentionKernelSet::kRowWarps);
  const auto [auto_out, auto_lse, auto_probs] =
      attention::cuda::run_attention_forward(p, q, k, v, std::nullopt, false, emulated_launch());
  EXPECT_LE(scaled_max_error(auto_out, out), 1e-5);
  EXPECT_LE(scaled_max_error(auto_lse, lse), 1e-5);
}

TEST(EmulatedAttentionTiles, AOneKeySentenceGetsExactlyZeroGradients) {
  // Every query of sentence 1 puts all its weight on the one key, so its output is that value and the true gradients
  // of its queries and key are 0; plain PyTorch's softmax backward gives exactly 0. The tiled backward sums dO.v and
  // dO.O in the same order, so it does too, instead of float32 residue summed over every query (issue 48, point 6).
  at::manual_seed(11);
  const at::Tensor q = at::randn({2, 5, 23, 40}), k = at::randn({2, 5, 23, 40}), v = at::randn({2, 5, 23, 56});
  const at::Tensor grad_out = at::randn({2, 5, 23, 56});
  const at::Tensor lengths = at::tensor(std::vector<int64_t>{23, 1});
  const std::vector<int64_t> kinds{kGlobal, kLocal, kForward, kBackward, kCausal};
  const attention::AttentionParams p =
      attention::check_attention_args("emulated attention", q, k, v, lengths, kinds, 2, 0.3, 0, 0.0, 0);
  using attention::cuda::AttentionKernelSet;
  // Both backward kernels: the warp-per-row one serves keys up to kRowBackwardMaxKeys by default. (The emulator runs
  // the warp-per-row kernels one warp per block: emulated_testing.h.)
  for (const AttentionKernelSet kernels : {AttentionKernelSet::kTiles, AttentionKernelSet::kRowWarps}) {
    const gpu::Launch launch = kernels == AttentionKernelSet::kTiles ? gpu::Launch{nullptr, 4} : emulated_launch();
    const auto [out, lse, probs] = attention::cuda::run_attention_forward(p, q, k, v, lengths, false, launch, kernels);
    EXPECT_TRUE(at::equal(out[1].select(1, 0), v[1].select(1, 0))) << "a row seeing one key outputs its value";
    const auto [grad_q, grad_k, grad_v] =
        attention::cuda::run_attention_backward(p, grad_out, q, k, v, out, lse, lengths, launch, kernels);
    const char* name = kernels == AttentionKernelSet::kTiles ? "tiles" : "row warps";
    EXPECT_EQ(at::count_nonzero(grad_q[1]).item<int64_t>(), 0) << name << ": " << grad_q[1].abs().max();
    EXPECT_EQ(at::count_nonzero(grad_k[1]).item<int64_t>(), 0) << name << ": " << grad_k[1].abs().max();
    EXPECT_GT(at::count_nonzero(grad_v[1].select(1, 0)).item<int64_t>(), 0) << name;  // the value keeps its gradient
  }
}

TEST(EmulatedAttentionLayouts, HeadViewsOfProjectionsGoInAsTheyAreAndResultsComeOutPositionMajor) {
  // The models hand the kernels head views of their projections and read the results back as (B, T, H * Dv) views:
  // the kernels address both through their strides (common/head_rows.h). The same values contiguous must give the
  // same results bit for bit, whichever kernel runs.
  at::manual_seed(13);
  const int64_t batch = 2, heads = 4, query_len = 11, key_len = 13, dim = 9, value_dim = 7;
  const at::Tensor q = at::randn({batch, heads, query_len, dim}), k = at::randn({batch, heads, key_len, dim});
  const at::Tensor v = at::randn({batch, heads, key_len, value_dim});
  const at::Tensor grad_out = at::randn({batch, heads, query_len, value_dim});
  const at::Tensor lengths = at::tensor(std::vector<int64_t>{13, 5});
  const std::vector<int64_t> kinds{kGlobal, kLocal, kForward, kCausal};
  const attention::AttentionParams p =
      attention::check_attention_args("emulated attention", q, k, v, lengths, kinds, 2, 0.3, 2, 0.0, 0);
  // q from a (B, T, H D) projection, k and v from one fused (B, S, 2 H D) projection, grad_out as a merged-heads
  // gradient (B, T, H Dv) arrives.
  const at::Tensor q_view = head_view(q, 1, 0), k_view = head_view(k, 2, 0), v_view = head_view(v, 1, 0);
  const at::Tensor grad_view = head_view(grad_out, 1, 0);
  using attention::cuda::AttentionKernelSet;
  for (const AttentionKernelSet kernels : {AttentionKernelSet::kTiles, AttentionKernelSet::kRowWarps}) {
    SCOPED_TRACE(kernels == AttentionKernelSet::kTiles ? "tiles" : "row warps");
    const gpu::Launch launch = kernels == AttentionKernelSet::kTiles ? gpu::Launch{nullptr, 4} : emulated_launch();
    const auto [out, lse, probs] = attention::cuda::run_attention_forward(p, q, k, v, lengths, false, launch, kernels);
    const auto [view_out, view_lse, view_probs] =
        attention::cuda::run_attention_forward(p, q_view, k_view, v_view, lengths, false, launch, kernels);
    EXPECT_TRUE(is_position_major(out) && is_position_major(view_out)) << out.strides() << view_out.strides();
    EXPECT_TRUE(at::equal(view_out, out));
    EXPECT_TRUE(at::equal(view_lse, lse));
    const auto [grad_q, grad_k, grad_v] =
        attention::cuda::run_attention_backward(p, grad_out, q, k, v, out, lse, lengths, launch, kernels);
    const auto [view_grad_q, view_grad_k, view_grad_v] = attention::cuda::run_attention_backward(
        p, grad_view, q_view, k_view, v_view, view_out, view_lse, lengths, launch, kernels);
    EXPECT_TRUE(at::equal(view_grad_q, grad_q));
    EXPECT_TRUE(at::equal(view_grad_k, grad_k));
    EXPECT_TRUE(at::equal(view_grad_v, grad_v));
    // Each gradient laid out like its input: contiguous for contiguous inputs, position-major for head views.
    EXPECT_TRUE(grad_q.is_contiguous() && grad_k.is_contiguous() && grad_v.is_contiguous());
    EXPECT_EQ(view_grad_q.strides(), q_view.strides());
    EXPECT_EQ(view_grad_v.strides(), v_view.strides());
    EXPECT_TRUE(is_position_major(view_grad_k)) << view_grad_k.strides();  // k's view is not dense: its order
  }
}

// The ATen work around the kernels' launches (issue 48, point 5), counted as test_dispatch_budget.cpp counts
// (dispatch_budget.h: allocations and views are free), with the module's head views: the forward adds nothing to its
// one kernel, the tiled backward nothing to its two. The warp-per-row backward (the default up to 128 keys) adds one
// zero fill for its dK and dV accumulators (views of one buffer), and in half precision their copies into the
// gradients after the kernel (float: the accumulators are the gradients, laid out as gradient_like lays them out, so
// that the entry point copies nothing); grad_q is written whole by the kernel, rows without keys included, so it is
// not zero-filled (until 2026-12-01: 3 fills and 2 casts in half precision, 3 fills in float; until 2026-12-02, 2
// fills in float).
TEST(EmulatedAttentionLaunches, NoAtenWorkBesideTheKernelsButTheWarpBackwardsAccumulators) {
  at::manual_seed(17);
  const std::vector<int64_t> kinds{kGlobal, kLocal, kForward, kBackward};
  const at::Tensor lengths = at::tensor(std::vector<int64_t>{12, 5});
  using attention::cuda::AttentionKernelSet;
  const std::map<std::string, int64_t> nothing, float_fill{{"aten::zero_", 1}},
      half_fill_and_copies{{"aten::zero_", 1}, {"aten::copy_", 2}};
  for (const DtypeCase& dtype : {kFloat32, kBFloat16}) {
    const at::Tensor q = head_view(random_input({2, 4, 12, 8}, dtype), 1, 0);
    const at::Tensor k = head_view(random_input({2, 4, 12, 8}, dtype), 2, 0);
    const at::Tensor v = head_view(random_input({2, 4, 12, 8}, dtype), 2, 1);
    const at::Tensor grad_out = head_view(random_input({2, 4, 12, 8}, dtype), 1, 0);
    const attention::AttentionParams p =
        attention::check_attention_args("emulated attention", q, k, v, lengths, kinds, 1, 0.3, 0, 0.0, 0);
    for (const AttentionKernelSet kernels : {AttentionKernelSet::kTiles, AttentionKernelSet::kRowWarps}) {
      const bool tiles = kernels == AttentionKernelSet::kTiles;
      const std::string what = std::string(tiles ? "tiles, " : "row warps, ") + dtype_name(dtype.dtype);
      const gpu::Launch launch = tiles ? gpu::Launch{nullptr, 4} : emulated_launch();
      testing::DispatchCount forward, backward;
      Triple outputs;
      {
        testing::DispatchCounter counter(forward, 1 << 30);
        outputs = attention::cuda::run_attention_forward(p, q, k, v, lengths, false, launch, kernels);
      }
      const auto& [out, lse, probs] = outputs;
      Triple grads;
      {
        testing::DispatchCounter counter(backward, 1 << 30);
        grads = attention::cuda::run_attention_backward(p, grad_out, q, k, v, out, lse, lengths, launch, kernels);
      }
      EXPECT_EQ(forward.ops, 0) << what << ": " << testing::describe(forward);
      const auto& want = tiles ? nothing : (dtype.dtype == at::kFloat ? float_fill : half_fill_and_copies);
      EXPECT_EQ(backward.by_name, want) << what << ": " << testing::describe(backward);
      const at::Tensor inputs[] = {q, k, v};
      const at::Tensor gradients[] = {std::get<0>(grads), std::get<1>(grads), std::get<2>(grads)};
      for (int i = 0; i < 3; ++i) {  // as the entry point lays them out (as_gradient_layout): no copy there
        EXPECT_EQ(gradients[i].strides(), gradient_like(inputs[i]).strides()) << what << ", gradient " << i;
        EXPECT_EQ(gradients[i].scalar_type(), inputs[i].scalar_type()) << what << ", gradient " << i;
      }
    }
  }
}

TEST(EmulatedAttentionRows, FullyMaskedRowsHaveZeroOutputAndMinusInfinityLse) {
  // The comparison above would also pass if both sides were wrong alike; state the masked-row contract directly.
  at::manual_seed(3);
  const at::Tensor q = at::randn({2, 1, 3, 4}), k = at::randn({2, 1, 3, 4}), v = at::randn({2, 1, 3, 4});
  const at::Tensor lengths = at::tensor(std::vector<int64_t>{3, 0});
  const std::vector<int64_t> kinds{kGlobal};
  const attention::AttentionParams p =
      attention::check_attention_args("emulated attention", q, k, v, lengths, kinds, 0, 0.5, 0, 0.0, 0);
  const auto [out, lse, probs] = attention::cuda::run_attention_forward(p, q, k, v, lengths, false, emulated_launch());
  EXPECT_TRUE(at::all(at::isneginf(lse[1])).item<bool>()) << lse;
  EXPECT_TRUE(at::all(out[1] == 0).item<bool>()) << out;
  EXPECT_TRUE(at::all(at::isfinite(lse[0])).item<bool>()) << lse;
}

// torch.use_deterministic_algorithms as Python sets it, for one test; restored on the way out.
class DeterministicAlgorithms {
 public:
  DeterministicAlgorithms(bool on, bool warn_only)
      : was_on_(at::globalContext().deterministicAlgorithms()),
        was_warn_only_(at::globalContext().deterministicAlgorithmsWarnOnly()) {
    at::globalContext().setDeterministicAlgorithms(on, warn_only);
  }
  ~DeterministicAlgorithms() { at::globalContext().setDeterministicAlgorithms(was_on_, was_warn_only_); }

 private:
  bool was_on_, was_warn_only_;
};

// The warnings raised in its scope, kept instead of printed.
class WarningsKept : public c10::WarningHandler {
 public:
  WarningsKept() : guard_(this) {}
  void process(const c10::Warning& warning) override { messages.push_back(warning.msg()); }
  std::vector<std::string> messages;

 private:
  c10::WarningUtils::WarningHandlerGuard guard_;
};

TEST(EmulatedAttentionDeterminism, EveryBackwardTheTilesServeGoesToThemAndTheWarpBackwardAlerts) {
  // The warp-per-row backward (kAuto's choice up to kRowBackwardMaxKeys keys) adds dK and dV atomically, in an order
  // a GPU changes from run to run; the tiled backward writes each gradient once. Under deterministic algorithms kAuto
  // sends every backward call of several query rows the tiles serve to them, and leaves the forward choice alone (the
  // forward kernels add nothing atomically) and one-row calls too (one addition per key, onto zero).
  at::manual_seed(19);
  const at::Tensor q = at::randn({2, 3, 9, 8}), k = at::randn({2, 3, 11, 8}), v = at::randn({2, 3, 11, 6});
  const at::Tensor grad_out = at::randn({2, 3, 9, 6});
  const at::Tensor lengths = at::tensor(std::vector<int64_t>{11, 4});
  const std::vector<int64_t> kinds{kGlobal, kLocal, kCausal};
  const attention::AttentionParams p =
      attention::check_attention_args("emulated attention", q, k, v, lengths, kinds, 1, 0.5, 0, 0.0, 0);
  attention::AttentionParams step = p;
  step.query_len = 1;
  using attention::cuda::AttentionKernelSet;
  using attention::cuda::tile_warps_for;
  const gpu::Launch four_warps{nullptr, 4};
  ASSERT_EQ(tile_warps_for<float>(p, four_warps, true, false, AttentionKernelSet::kAuto), 0) << "warp backward";
  const auto [out, lse, probs] = attention::cuda::run_attention_forward(p, q, k, v, lengths, false, emulated_launch());
  const Triple tiles = attention::cuda::run_attention_backward(p, grad_out, q, k, v, out, lse, lengths,
                                                               emulated_launch(), AttentionKernelSet::kTiles);
  for (const bool warn_only : {false, true}) {
    SCOPED_TRACE(warn_only ? "warn_only" : "error");
    DeterministicAlgorithms deterministic(true, warn_only);
    WarningsKept warnings;
    EXPECT_EQ(tile_warps_for<float>(p, four_warps, true, false, AttentionKernelSet::kAuto), 4);
    EXPECT_EQ(tile_warps_for<at::BFloat16>(p, four_warps, true, false, AttentionKernelSet::kAuto), 4);
    EXPECT_EQ(tile_warps_for<float>(step, four_warps, true, false, AttentionKernelSet::kAuto), 0) << "one row";
    EXPECT_EQ(tile_warps_for<float>(step, four_warps, false, false, AttentionKernelSet::kAuto), 0) << "forward";
    EXPECT_EQ(tile_warps_for<float>(p, four_warps, true, false, AttentionKernelSet::kRowWarps), 0) << "forced";
    testing::DispatchCount backward;
    Triple grads;
    {
      testing::DispatchCounter counter(backward, 1 << 30);
      grads = attention::cuda::run_attention_backward(p, grad_out, q, k, v, out, lse, lengths, emulated_launch());
    }
    // (deterministic mode fills new tensors with NaN, so fills of empty tensors may show; the warp backward's
    // accumulator fill must not)
    EXPECT_EQ(backward.by_name.count("aten::zero_"), 0u) << "the tiled backward: " << testing::describe(backward);
    EXPECT_TRUE(at::equal(std::get<0>(grads), std::get<0>(tiles)));
    EXPECT_TRUE(at::equal(std::get<1>(grads), std::get<1>(tiles)));
    EXPECT_TRUE(at::equal(std::get<2>(grads), std::get<2>(tiles)));
    EXPECT_TRUE(warnings.messages.empty()) << warnings.messages.front();
  }

  // Where the tiles cannot serve (head sizes past kTileMaxHeadDim) or the warp kernels are forced, the warp backward
  // says it is not deterministic: an error, or with warn_only a warning and the gradients. One query row adds to each
  // key once, so a decoding step's backward runs without a word.
  const at::Tensor wide_q = at::randn({1, 2, 5, 130}), wide_k = at::randn({1, 2, 5, 130});
  const at::Tensor wide_v = at::randn({1, 2, 5, 72}), wide_grad_out = at::randn({1, 2, 5, 72});
  const std::vector<int64_t> two_kinds{kGlobal, kForward};
  const attention::AttentionParams wide = attention::check_attention_args(
      "emulated attention", wide_q, wide_k, wide_v, std::nullopt, two_kinds, 1, 0.5, 0, 0.0, 0);
  const auto [wide_out, wide_lse, wide_probs] =
      attention::cuda::run_attention_forward(wide, wide_q, wide_k, wide_v, std::nullopt, false, emulated_launch());
  const auto wide_backward = [&](const attention::AttentionParams& params, const at::Tensor& grad, const at::Tensor& q_,
                                 const at::Tensor& out_, const at::Tensor& lse_) {
    return attention::cuda::run_attention_backward(params, grad, q_, wide_k, wide_v, out_, lse_, std::nullopt,
                                                   emulated_launch());
  };
  {
    DeterministicAlgorithms deterministic(true, false);
    try {
      wide_backward(wide, wide_grad_out, wide_q, wide_out, wide_lse);
      ADD_FAILURE() << "the warp backward ran under deterministic algorithms without an error";
    } catch (const c10::Error& e) {
      EXPECT_NE(std::string(e.what()).find("does not have a deterministic implementation"), std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find("mma_nmt::attention_backward"), std::string::npos) << e.what();
    }
    EXPECT_THROW(attention::cuda::run_attention_backward(p, grad_out, q, k, v, out, lse, lengths, emulated_launch(),
                                                         AttentionKernelSet::kRowWarps),
                 c10::Error);
    attention::AttentionParams wide_step = wide;
    wide_step.query_len = 1;
    const at::Tensor step_q = wide_q.narrow(2, 0, 1), step_grad_out = wide_grad_out.narrow(2, 0, 1);
    const auto [step_out, step_lse, step_probs] = attention::cuda::run_attention_forward(
        wide_step, step_q, wide_k, wide_v, std::nullopt, false, emulated_launch());
    EXPECT_NO_THROW(wide_backward(wide_step, step_grad_out, step_q, step_out, step_lse));
  }
  {
    DeterministicAlgorithms deterministic(true, true);
    WarningsKept warnings;
    const Triple warned = wide_backward(wide, wide_grad_out, wide_q, wide_out, wide_lse);
    ASSERT_EQ(warnings.messages.size(), 1u);
    EXPECT_NE(warnings.messages[0].find("mma_nmt::attention_backward"), std::string::npos) << warnings.messages[0];
    const Triple plain = [&] {
      DeterministicAlgorithms off(false, false);
      return wide_backward(wide, wide_grad_out, wide_q, wide_out, wide_lse);
    }();
    EXPECT_TRUE(at::equal(std::get<1>(warned), std::get<1>(plain))) << "the emulator adds in one order";
  }
}

std::string case_name(const ::testing::TestParamInfo<std::tuple<AttentionCase, DtypeCase>>& info) {
  return std::get<0>(info.param).name + "_" + dtype_name(std::get<1>(info.param).dtype);
}

INSTANTIATE_TEST_SUITE_P(Cases, EmulatedAttention,
                         ::testing::Combine(::testing::ValuesIn(kCases), ::testing::ValuesIn(kAllDtypes)), case_name);

}  // namespace
}  // namespace mma_nmt::emulated
