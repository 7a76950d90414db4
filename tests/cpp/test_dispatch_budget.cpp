// Launch budgets of the compositions (csrc/*/*_composition.cpp, the CUDA backend's default paths), counted on CPU
// tensors, where CI runs them (issue 48, point 5): the ops each call dispatches (dispatch_budget.h says what counts)
// and the buffers of B x T x S elements or more it makes without weights asked for. Each budget is today's count, so
// that any creep fails on every commit, GPU or not; lower it when a change lowers the count. The targets are
// written beside each budget; where a budget is above its target, the target is not met yet (docs/cuda.md).
//
// Sizes: H * D and every other legitimate size stay well under B * T * S, so a (B, ., T, S) mask, bias or mixture is
// the only thing that reaches it.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "attention/attention_composition.h"
#include "attention/head_mask.h"
#include "attention_op_types.h"
#include "dispatch_budget.h"
#include "gmm/gmm_composition.h"
#include "luong/shared_value_composition.h"

namespace {

using mma_nmt::attention::AttentionParams;
using mma_nmt::testing::Budget;
using mma_nmt::testing::count;
using mma_nmt::testing::DispatchCount;
using mma_nmt::testing::DispatchCounter;
using mma_nmt::testing::expect_within;
using Triple = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

// ---- the counter itself ------------------------------------------------------------------------------------------

TEST(DispatchCounter, CountsLeavesAndFusedKernelsOnceAndViewsNever) {
  const at::Tensor x = at::randn({4, 6});
  const at::Tensor mask = x.gt(0);
  EXPECT_EQ(count([&] { (void)x.view({6, 4}).transpose(0, 1).unsqueeze(0); }, 1000).ops, 0);
  EXPECT_EQ(count([&] { (void)at::zeros({4, 6}); }, 1000).ops, 1);                  // empty + fill_
  EXPECT_EQ(count([&] { (void)x.masked_fill(mask, 0.0); }, 1000).ops, 2);          // clone's copy_ + masked_fill_
  EXPECT_EQ(count([&] { (void)x.t().contiguous(); }, 1000).ops, 1);                // the copy
  EXPECT_EQ(count([&] { (void)x.contiguous(); }, 1000).ops, 0);                    // already contiguous: nothing
  const DispatchCount sdpa = count(
      [&] {
        const at::Tensor q = at::randn({1, 2, 5, 4});
        (void)at::scaled_dot_product_attention(q, q, q);
      },
      1000);
  EXPECT_EQ(sdpa.by_name.count("aten::_scaled_dot_product_flash_attention_for_cpu"), 1u) << describe(sdpa);
  EXPECT_EQ(sdpa.ops, 2) << describe(sdpa);  // randn's normal_ + the fused kernel, whatever it calls inside
  // one buffer of 24 elements, returned by clone's copy_ and by masked_fill_: counted once
  EXPECT_EQ(count([&] { (void)x.masked_fill(mask, 0.0); }, 24).large_outputs.size(), 1u);
  EXPECT_EQ(count([&] { (void)x.masked_fill(mask, 0.0); }, 25).large_outputs.size(), 0u);
}

// ---- mma_nmt::attention by kind ----------------------------------------------------------------------------------

constexpr int64_t G = mma_nmt::attention::kGlobal, L = mma_nmt::attention::kLocal, F = mma_nmt::attention::kForward,
                  B = mma_nmt::attention::kBackward, C = mma_nmt::attention::kCausal;

using mma_nmt::testing::AttentionBackwardFn;
using mma_nmt::testing::AttentionFn;

struct AttentionBudgetCase {
  std::string name;
  std::vector<int64_t> kinds;
  int64_t query_len, key_len;
  Budget forward, backward;
};

void PrintTo(const AttentionBudgetCase& c, std::ostream* os) { *os << c.name; }

// B 2, D 4, padded keys (one sentence shorter than S): the benchmark's case. The GLFB targets are issue 48's (at most
// 8 forward, 18 backward). For the uniform calls (cross-attention all G, decoder self-attention C) the issue asks one
// flash call each; the targets written here (3 and 6) are ours, that call plus the cumulative key lengths.
// Counted 2026-11-28 at commit db0fed8 with torch 2.13.0+cpu, the version scripts/setup.sh pins (another torch may
// decompose its ops otherwise and move the counts): GLFB 111 / 121 ops, 12 / 12 B x T x S buffers (per SDPA group: two
// bitwise_and and a bitwise_or of the visibility, the additive bias); all G 35 / 39, all C 35 / 39, 4 / 4 buffers each.
// 2026-11-29: backward + 3 (eq and two masked_fill_: the one-key sentences' exact zero gradients, issue 48 point 6);
// then the uniform calls' backward - 3 (the gradients' contiguous copies: the entry point lays them out once).
// 2026-11-30: each SDPA call computes its padding mask once (it was built four times: for the visibility twice and
// for zeroing k and v) and a global group's mask is (B, 1, 1, S), one row a sentence, without the (T, S) rule: GLFB
// 79 / 92 ops, 9 / 9 buffers; all G 21 / 25, 1 / 1; all C 26 / 30, 4 / 4.
// 2026-12-02: a mixed call joins its groups' results by one cat each instead of a copy per group and result: GLFB
// 73 / 83.
const AttentionBudgetCase kAttentionCases[] = {
    {"GLFBSelfAttentionPadded", {G, L, F, B}, 32, 32, {73, 9, 8}, {83, 9, 18}},
    {"AllGlobalCrossAttentionPadded", {G, G, G, G}, 24, 32, {21, 1, 3}, {25, 1, 6}},
    {"AllCausalSelfAttentionPadded", {C, C, C, C}, 32, 32, {26, 4, 3}, {30, 4, 6}},
};

class AttentionCompositionBudget : public ::testing::TestWithParam<AttentionBudgetCase> {};

TEST_P(AttentionCompositionBudget, ForwardAndBackwardWithinBudget) {
  const AttentionBudgetCase& c = GetParam();
  at::manual_seed(5);
  const int64_t batch = 2, heads = static_cast<int64_t>(c.kinds.size()), dim = 4;
  const int64_t large = mma_nmt::testing::attention_large_numel(batch, heads, c.query_len, c.key_len, dim);
  const at::Tensor q = at::randn({batch, heads, c.query_len, dim});
  const at::Tensor k = at::randn({batch, heads, c.key_len, dim});
  const at::Tensor v = at::randn({batch, heads, c.key_len, dim});
  const at::Tensor grad_out = at::randn({batch, heads, c.query_len, dim});
  const std::optional<at::Tensor> lengths = at::tensor(std::vector<int64_t>{c.key_len, c.key_len - 11});
  const AttentionParams p =
      mma_nmt::attention::check_attention_args("test", q, k, v, lengths, c.kinds, 1, 0.5, 0, 0.0, 0);
  ASSERT_TRUE(mma_nmt::attention::splittable(p, false));

  // the CPU kernel stands in for the hand-written CUDA kernel (the local heads): one op, as on the GPU one launch
  const auto forward = c10::Dispatcher::singleton().findSchemaOrThrow("mma_nmt::attention", "").typed<AttentionFn>();
  const auto backward =
      c10::Dispatcher::singleton().findSchemaOrThrow("mma_nmt::attention_backward", "").typed<AttentionBackwardFn>();
  const mma_nmt::attention::AttentionKernels kernels{
      [&](const AttentionParams& gp, const at::Tensor& gq, const at::Tensor& gk, const at::Tensor& gv,
          const std::optional<at::Tensor>& kl) {
        return forward.call(gq, gk, gv, kl, gp.head_kinds, gp.window, gp.scale, gp.query_offset, 0.0, 0, false, false);
      },
      [&](const AttentionParams& gp, const at::Tensor& g_grad_out, const at::Tensor& gq, const at::Tensor& gk,
          const at::Tensor& gv, const at::Tensor& g_out, const at::Tensor& g_lse, const std::optional<at::Tensor>& kl) {
        return backward.call(g_grad_out, gq, gk, gv, g_out, g_lse, kl, gp.head_kinds, gp.window, gp.scale,
                             gp.query_offset, 0.0, 0, false);
      }};

  Triple result;
  const DispatchCount f = count([&] { result = attention_forward_by_kind(p, q, k, v, lengths, kernels); }, large);
  expect_within(f, c.forward, (c.name + " forward").c_str());
  const auto& [out, lse, probs] = result;
  const DispatchCount b = count(
      [&] { (void)attention_backward_by_kind(p, grad_out, q, k, v, out, lse, lengths, kernels); }, large);
  expect_within(b, c.backward, (c.name + " backward").c_str());
}

INSTANTIATE_TEST_SUITE_P(Kinds, AttentionCompositionBudget, ::testing::ValuesIn(kAttentionCases),
                         [](const ::testing::TestParamInfo<AttentionBudgetCase>& info) { return info.param.name; });

// ---- mma_nmt::gmm_attention and mma_nmt::shared_value_attention --------------------------------------------------

// Issue 49, point 6: each one kernel per direction; the target is at most 3 ops per direction of the fast path.
// Counted 2026-11-28 (as above): GMM 89 / 132 ops with 15 / 31 B x T x S buffers (the SDPA half's mask and bias, then
// the (B, H, T, S) mixture, elementwise per component); shared-value 36 / 38 ops, 4 / 8 buffers (its logits and
// probabilities are (B, H, T, S): with no weights asked for, a fused kernel would make none). 2026-11-30: the GMM
// output as one lerp written position-major (the kernels' layout), 84 forward ops; then the padding mask computed once
// per SDPA call and reused for the values (GMM 67 / 113 ops, 12 / 28 buffers; shared-value forward 28); then the
// shared-value backward's softmax gradient as torch's one kernel and the logits' scale as a GEMM's alpha (20 -> 16).
// 2026-12-03: GMM's mixture half one pass each way (gmm/mixture_passes.h, one kernel on the GPU, counted as the
// mma_nmt:: op its CPU loop records), where ATen ops built the (B, H, T, S) mixture one pass per component and step:
// 67 / 113 ops to 31 / 42, 12 / 28 buffers to 2 / 3; then its dot-product half mma_nmt::attention itself (one op
// here; on the GPU what that operator runs for the call: its tiled kernels, 1 / 2 launches, at decoder sizes), where
// the SDPA composition built masks and fixed up rows without keys (21 / 25 ops): 12 / 18, buffers 1 / 2 (beta; in
// backward also dO v^T).
// Then the forward's empty weights as empty tensors, not a zero fill and a clone: 10.
constexpr Budget kGmmForward{10, 1, 3}, kGmmBackward{18, 2, 3};
constexpr Budget kSharedValueForward{28, 4, 3}, kSharedValueBackward{16, 5, 3};
// multihop_second_hop's CUDA implementation is no composition of ATen ops beside the gate kernels any more: its ATen
// work (the GEMMs) is counted around the emulated kernels (tests/cpp/emulated/test_emulated_second_hop.cpp,
// EmulatedSecondHopLaunches). 2026-11-28: 3 GEMMs + tanh + add + the gate forward, and 9 GEMMs + the gate backward,
// with layout copies (4 and 10) around them; 2026-11-29, the GEMMs on the position-major rows as they lie: 6 and 10.

TEST(GmmCompositionBudget, ForwardAndBackwardWithinBudget) {
  at::manual_seed(7);
  const int64_t batch = 2, heads = 2, query_len = 16, key_len = 32, dim = 4, components = 2;
  const int64_t large = batch * query_len * key_len;
  const at::Tensor q = at::randn({batch, heads, query_len, dim});
  const at::Tensor k = at::randn({batch, heads, key_len, dim});
  const at::Tensor v = at::randn({batch, heads, key_len, dim});
  const at::Tensor grad_out = at::randn({batch, heads, query_len, dim});
  const at::Tensor omega = at::softmax(at::randn({batch, heads, query_len, components}), -1);
  const at::Tensor mu = at::rand({batch, heads, query_len, components}) * key_len;
  const at::Tensor sigma = at::rand({batch, heads, query_len, components}) * 4 + 0.5;
  const at::Tensor gate = at::sigmoid(at::randn({batch, heads, query_len}));
  const std::optional<at::Tensor> lengths = at::tensor(std::vector<int64_t>{key_len, key_len - 11});
  const auto p = mma_nmt::gmm::check_gmm_args("test", q, k, v, lengths, omega, mu, sigma, gate, {}, 0.5, 0, 0.05);
  ASSERT_TRUE(mma_nmt::gmm::composable(p, false));

  std::optional<mma_nmt::gmm::GmmForwardResult> result;
  const DispatchCount f = count(
      [&] {
        result = gmm_forward_by_composition(p, q, k, v, lengths, omega, mu, sigma, gate, false,
                                            mma_nmt::gmm::cpu_composition_kernels());
      },
      large);
  ASSERT_TRUE(result.has_value());
  expect_within(f, kGmmForward, "gmm_attention forward");
  const auto& [out, lse, log_mass, alpha_context, beta_context, alpha, beta] = *result;
  std::optional<mma_nmt::gmm::GmmBackwardResult> grads;
  const DispatchCount b = count(
      [&] {
        grads = gmm_backward_by_composition(p, grad_out, q, k, v, lengths, omega, mu, sigma, gate, lse, alpha_context,
                                            beta_context, mma_nmt::gmm::cpu_composition_kernels());
      },
      large);
  ASSERT_TRUE(grads.has_value());
  expect_within(b, kGmmBackward, "gmm_attention backward");
}

TEST(SharedValueCompositionBudget, ForwardAndBackwardWithinBudget) {
  at::manual_seed(11);
  const int64_t batch = 2, heads = 2, query_len = 16, key_len = 32, dim = 4, value_dim = 8;
  const int64_t large = batch * query_len * key_len;
  const at::Tensor q = at::randn({batch, heads, query_len, dim});
  const at::Tensor k = at::randn({batch, heads, key_len, dim});
  const at::Tensor v = at::randn({batch, key_len, value_dim});
  const at::Tensor grad_out = at::randn({batch, heads, query_len, value_dim});
  const std::optional<at::Tensor> lengths = at::tensor(std::vector<int64_t>{key_len, key_len - 11});
  const auto p = mma_nmt::luong::check_shared_value_args("test", q, k, v, lengths, 0.5);

  Triple result;
  const DispatchCount f = count(
      [&] { result = mma_nmt::luong::shared_value_forward_by_composition(p, q, k, v, lengths, false); }, large);
  expect_within(f, kSharedValueForward, "shared_value_attention forward");
  const auto& [out, lse, probs] = result;
  const DispatchCount b = count(
      [&] { (void)mma_nmt::luong::shared_value_backward_by_composition(p, grad_out, q, k, v, out, lse, lengths); },
      large);
  expect_within(b, kSharedValueBackward, "shared_value_attention backward");
}

}  // namespace
