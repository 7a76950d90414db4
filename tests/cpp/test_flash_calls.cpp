// mma_nmt::attention's FlashAttention-2 paths (attention/flash_calls.h) on CPU tensors: FA2's two calls replaced by
// stand-ins that compute what FA2 does (each sequence alone, windows anchored bottom-right as flash_visible_keys, a
// sequence without keys giving output 0 and lse +inf, a sequence without queries giving its keys zero gradients:
// flash_fwd_kernel.h and flash_bwd_kernel.h's early exits) in float64 and leave NaN wherever FA2 leaves memory
// unwritten (rows outside every sequence). Everything around FA2 is the code the GPU runs: the window arguments per
// kind, the sequences of padded batches in place, the lse layouts and the split by kind. Checked against the CPU
// kernel through the dispatcher: every kind of sequences, each kind of head, padding with a length-1 and an empty
// sentence, T != S with an offset, NaN behind the padding, and mixed kinds with a group FA2 cannot take (which goes
// to the CPU kernel here, the hand-written one on the GPU). Padding query rows of a padded call declared
// self-attention must come out 0 with lse -inf and pass no gradient (SPEC's shared rules); the reference is the CPU
// kernel with those rows' grad_out set to 0. A cross-attention whose lengths are equal by chance keeps every row.
// Then the ATen ops around FA2, counted as the launch budgets count them.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <algorithm>
#include <iostream>
#include <limits>
#include <optional>
#include <set>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "attention/attention_composition.h"
#include "attention_op_types.h"
#include "attention/flash_calls.h"
#include "attention/head_mask.h"
#include "dispatch_budget.h"
#include "padding_nan.h"

namespace {

using mma_nmt::attention::AttentionKernels;
using mma_nmt::attention::AttentionParams;
using mma_nmt::attention::FlashCall;
using mma_nmt::attention::FlashKernels;
using mma_nmt::attention::FlashSequenceCache;
using mma_nmt::testing::DispatchCount;
using Triple = mma_nmt::testing::AttentionTriple;
using mma_nmt::testing::AttentionBackwardFn;
using mma_nmt::testing::AttentionFn;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// --- the FA2 stand-ins ---------------------------------------------------------------------------------------------

// One FA2 sequence: its query and key rows, in the batched (B, L, H, D) form (sentence `batch`) or the variable-length
// (rows, H, D) form (batch -1).
struct Sequence {
  int64_t batch, q_begin, queries, k_begin, keys;
};

std::vector<Sequence> sequences(const at::Tensor& q, const at::Tensor& k, const FlashCall& c) {
  std::vector<Sequence> out;
  if (!c.cu_q.defined()) {
    for (int64_t b = 0; b < q.size(0); ++b) out.push_back({b, 0, q.size(1), 0, k.size(1)});
    return out;
  }
  const at::Tensor cu_q = c.cu_q.to(at::kLong), cu_k = c.cu_k.to(at::kLong);
  for (int64_t b = 0; b + 1 < cu_q.size(0); ++b) {
    const int64_t q0 = cu_q[b].item<int64_t>(), k0 = cu_k[b].item<int64_t>();
    out.push_back({-1, q0, cu_q[b + 1].item<int64_t>() - q0, k0, cu_k[b + 1].item<int64_t>() - k0});
  }
  return out;
}

// The sequence's rows of x, (rows, H, D).
at::Tensor rows_of(const at::Tensor& x, const Sequence& s, bool queries) {
  const at::Tensor all = s.batch >= 0 ? x[s.batch] : x;
  return queries ? all.narrow(0, s.q_begin, s.queries) : all.narrow(0, s.k_begin, s.keys);
}

// (H, queries, keys) probabilities of a sequence under FA2's window; `lse` (H, queries) given or computed. A row with
// no visible key gets all-zero probabilities and lse +inf.
std::pair<at::Tensor, at::Tensor> probabilities(const at::Tensor& qs, const at::Tensor& ks, const FlashCall& c,
                                                std::optional<at::Tensor> lse) {
  const mma_nmt::attention::FlashWindow w{c.is_causal ? -1 : c.left.value_or(-1), c.is_causal ? 0 : c.right.value_or(-1)};
  at::Tensor visible = at::zeros({qs.size(0), ks.size(0)}, qs.options().dtype(at::kBool));
  for (int64_t i = 0; i < qs.size(0); ++i) {
    const auto range = mma_nmt::attention::flash_visible_keys(w, i, qs.size(0), ks.size(0));
    if (!range.empty()) visible[i].narrow(0, range.begin, range.end - range.begin).fill_(true);
  }
  const at::Tensor logits = at::einsum("qhd,khd->hqk", {qs, ks}).mul(c.scale).masked_fill(visible.logical_not(), -kInf);
  const at::Tensor no_key = visible.any(-1).logical_not();  // (queries,)
  if (!lse.has_value()) lse = at::logsumexp(logits, -1).masked_fill(no_key, kInf);
  const at::Tensor p = (logits - lse->unsqueeze(-1)).exp().masked_fill(no_key.view({1, -1, 1}), 0.0);
  return {p, *lse};
}

// Each stand-in is one fused kernel to the op counter (dispatch_budget.h), as FA2's call is one launch on the GPU.
std::tuple<at::Tensor, at::Tensor> flash_forward_standin(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                         const FlashCall& c) {
  RECORD_FUNCTION("mma_nmt::fa2_forward_stand_in", std::vector<c10::IValue>());
  at::Tensor out = at::full_like(q, kNaN);
  const bool batched = !c.cu_q.defined();
  at::Tensor lse = batched ? at::full({q.size(0), q.size(2), q.size(1)}, kNaN, q.options())  // (B, H, T)
                           : at::full({q.size(1), q.size(0)}, kNaN, q.options());            // (H, rows)
  for (const Sequence& s : sequences(q, k, c)) {
    const auto [p, row_lse] = probabilities(rows_of(q, s, true), rows_of(k, s, false), c, std::nullopt);
    rows_of(out, s, true).copy_(at::einsum("hqk,khd->qhd", {p, rows_of(v, s, false)}));
    (batched ? lse[s.batch] : lse).narrow(1, s.q_begin, s.queries).copy_(row_lse);
  }
  return {out, lse};
}

Triple flash_backward_standin(const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                              const at::Tensor& out, const at::Tensor& lse, const FlashCall& c) {
  RECORD_FUNCTION("mma_nmt::fa2_backward_stand_in", std::vector<c10::IValue>());
  at::Tensor grad_q = at::full_like(q, kNaN), grad_k = at::full_like(k, kNaN), grad_v = at::full_like(v, kNaN);
  const bool batched = !c.cu_q.defined();
  for (const Sequence& s : sequences(q, k, c)) {
    const at::Tensor qs = rows_of(q, s, true), ks = rows_of(k, s, false), vs = rows_of(v, s, false);
    const at::Tensor row_lse = (batched ? lse[s.batch] : lse).narrow(1, s.q_begin, s.queries).to(q.scalar_type());
    const at::Tensor p = probabilities(qs, ks, c, row_lse).first;  // (H, queries, keys)
    const at::Tensor d_out = rows_of(grad_out, s, true), o = rows_of(out, s, true);
    const at::Tensor delta = (d_out * o).sum(-1).transpose(0, 1).unsqueeze(-1);  // (H, queries, 1)
    const at::Tensor d_logits = p * (at::einsum("qhd,khd->hqk", {d_out, vs}) - delta);
    rows_of(grad_q, s, true).copy_(at::einsum("hqk,khd->qhd", {d_logits, ks}).mul(c.scale));
    rows_of(grad_k, s, false).copy_(at::einsum("hqk,qhd->khd", {d_logits, qs}).mul(c.scale));
    rows_of(grad_v, s, false).copy_(at::einsum("hqk,qhd->khd", {p, d_out}));
  }
  return {grad_q, grad_k, grad_v};
}

// The sequence starts are the library's own (flash_sequence_starts_on_host: the CUDA kernel's arithmetic on the host).
const FlashKernels kStandins{flash_forward_standin, flash_backward_standin,
                             mma_nmt::attention::flash_sequence_starts_on_host};

// --- the CPU kernel, and the split by kind as attention_cuda.cpp makes it ------------------------------------------

Triple cpu_forward(const AttentionParams& p, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                   const std::optional<at::Tensor>& lengths) {
  static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("mma_nmt::attention", "").typed<AttentionFn>();
  return op.call(q, k, v, lengths, p.head_kinds, p.window, p.scale, p.query_offset, 0.0, 0, false, false);
}

Triple cpu_backward(const AttentionParams& p, const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k,
                    const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse,
                    const std::optional<at::Tensor>& lengths) {
  static const auto op =
      c10::Dispatcher::singleton().findSchemaOrThrow("mma_nmt::attention_backward", "").typed<AttentionBackwardFn>();
  return op.call(grad_out, q, k, v, out, lse, lengths, p.head_kinds, p.window, p.scale, p.query_offset, 0.0, 0, false);
}

// FA2 (the stand-ins) for each group it takes, the CPU kernel for the others; counts the groups FA2 took. `cache`:
// the call's shared sequences, as on the GPU (null: each group computes its own).
AttentionKernels flash_or_cpu(int* flash_groups, FlashSequenceCache* cache = nullptr) {
  return {[flash_groups, cache](const AttentionParams& p, const at::Tensor& q, const at::Tensor& k,
                                const at::Tensor& v, const std::optional<at::Tensor>& lengths) {
            if (!mma_nmt::attention::flash_group_sequences(p, lengths)) return cpu_forward(p, q, k, v, lengths);
            ++*flash_groups;
            return mma_nmt::attention::flash_group_forward(p, q, k, v, lengths, kStandins, cache);
          },
          [cache](const AttentionParams& p, const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k,
                  const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse,
                  const std::optional<at::Tensor>& lengths) {
            if (!mma_nmt::attention::flash_group_sequences(p, lengths)) {
              return cpu_backward(p, grad_out, q, k, v, out, lse, lengths);
            }
            return mma_nmt::attention::flash_group_backward(p, grad_out, q, k, v, out, lse, lengths, kStandins, cache);
          }};
}

// --- cases -------------------------------------------------------------------------------------------------------

struct Case {
  std::string name;
  std::string kinds;  // one letter per head
  int64_t batch, query_len, key_len, dim;
  std::vector<int64_t> key_lengths;  // empty: no padding
  int64_t query_offset;
  bool self_attention;  // the caller's flag (the operator's self_attention)
  int flash_groups;     // how many groups FA2 must take
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

const Case kCases[] = {
    {"GlobalUnpaddedTNotS", "GG", 2, 5, 7, 8, {}, 0, false, 1},
    {"CausalStepAfterCachedKeys", "C", 2, 3, 7, 8, {}, 4, false, 1},
    {"LocalForwardBackwardUnpadded", "LFBL", 2, 6, 6, 8, {}, 0, false, 3},
    {"ForwardWithOffsetUnpadded", "F", 2, 3, 5, 8, {}, 2, false, 1},
    // queries before their keys (S - T = offset < 0): the first rows of the C, B and L heads see no key (lse -inf,
    // where FA2 writes +inf)
    {"QueriesBeforeTheirKeysUnpadded", "CBL", 2, 6, 4, 8, {}, -2, false, 3},
    {"GlobalCrossAttentionPaddedEmptySentence", "GG", 3, 4, 6, 8, {6, 1, 0}, 0, false, 1},
    {"MixedSelfAttentionPaddedEmptySentence", "GLFB", 3, 7, 7, 8, {7, 1, 0}, 0, true, 4},
    {"CausalSelfAttentionPadded", "CC", 2, 5, 5, 8, {3, 5}, 0, true, 1},
    // T != S with key padding: FA2 takes the global heads; no sequences give the forward heads our rule
    {"MixedCrossAttentionPaddedOneGroupLeft", "GF", 2, 4, 6, 8, {6, 2}, 0, false, 1},
    // T = S by chance in a cross-attention: the query rows past a sentence's keys are real and see keys in the L, B
    // and C heads (the F heads' see none), so only the global heads go to FA2 and every row is compared
    {"MixedCrossAttentionPaddedEqualLengths", "GLFBC", 3, 6, 6, 8, {6, 2, 0}, 0, false, 1},
};

int64_t kind_of(char letter) {
  switch (letter) {
    case 'L':
      return mma_nmt::attention::kLocal;
    case 'F':
      return mma_nmt::attention::kForward;
    case 'B':
      return mma_nmt::attention::kBackward;
    case 'C':
      return mma_nmt::attention::kCausal;
    default:
      return mma_nmt::attention::kGlobal;
  }
}

// q, k, v as head views of (B, L, H, D) projections, as the modules pass them, and grad_out as the backward of their
// merge of the output's heads (a view) passes it: (B, H, T, D) views of (B, T, H, D) tensors.
struct Inputs {
  at::Tensor q, k, v, grad_out;
};

Inputs head_views(int64_t batch, int64_t heads, int64_t query_len, int64_t key_len, int64_t dim) {
  const auto options = at::TensorOptions().dtype(at::kDouble);
  const auto view = [&](int64_t len) { return at::randn({batch, len, heads, dim}, options).transpose(1, 2); };
  return {view(query_len), view(key_len), view(key_len), view(query_len)};
}

class FlashCallsMatchCpuKernel : public ::testing::TestWithParam<Case> {};

TEST_P(FlashCallsMatchCpuKernel, ForwardAndBackward) {
  const Case& c = GetParam();
  at::manual_seed(29);
  const int64_t heads = static_cast<int64_t>(c.kinds.size());
  const Inputs x = head_views(c.batch, heads, c.query_len, c.key_len, c.dim);
  const at::Tensor &q = x.q, &k = x.k, &v = x.v;
  const std::optional<at::Tensor> lengths =
      c.key_lengths.empty() ? std::nullopt : std::optional<at::Tensor>(at::tensor(c.key_lengths));
  std::vector<int64_t> kinds;
  for (const char letter : c.kinds) kinds.push_back(kind_of(letter));
  const AttentionParams p =
      mma_nmt::attention::check_attention_args("test", q, k, v, lengths, kinds, 1, 0.3, c.query_offset, 0.0, 0,
                                               c.self_attention);

  int flash_groups = 0;
  const AttentionKernels kernels = flash_or_cpu(&flash_groups);
  const auto [out, lse, probs] = mma_nmt::attention::flash_forward_per_kind(p, q, k, v, lengths, kernels);
  EXPECT_EQ(flash_groups, c.flash_groups);

  // The rows that may come out 0 (SPEC's shared rules), by the test's own rule rather than the code's: the padding
  // query rows of the non-global heads of a padded call declared self-attention (the global heads keep every query).
  const auto options = q.options();
  at::Tensor left_out = at::zeros({c.batch, heads, c.query_len}, options.dtype(at::kBool));
  if (lengths.has_value() && c.self_attention) {
    const at::Tensor past = at::arange(c.query_len).view({1, -1}) >= lengths->view({-1, 1});  // (B, T)
    for (int64_t h = 0; h < heads; ++h) {
      if (kinds[h] != mma_nmt::attention::kGlobal) left_out.select(1, h).copy_(past);
    }
  }
  const auto [want_out, want_lse, want_probs] = cpu_forward(p, q, k, v, lengths);
  EXPECT_TRUE(at::allclose(out, want_out.masked_fill(left_out.unsqueeze(-1), 0.0), 1e-10, 1e-10)) << "out";
  EXPECT_TRUE(at::allclose(lse, want_lse.masked_fill(left_out, -kInf), 1e-10, 1e-10, /*equal_nan=*/false)) << "lse";
  EXPECT_TRUE(lse.is_contiguous()) << "lse (B, H, T), as the operator returns it";

  const auto [grad_q, grad_k, grad_v] =
      mma_nmt::attention::flash_backward_per_kind(p, x.grad_out, q, k, v, out, lse, lengths, kernels);
  const at::Tensor grad_out = x.grad_out.masked_fill(left_out.unsqueeze(-1), 0.0);  // those rows pass no gradient
  const auto [want_q, want_k, want_v] = cpu_backward(p, grad_out, q, k, v, want_out, want_lse, lengths);
  EXPECT_TRUE(at::allclose(grad_q, want_q, 1e-10, 1e-10)) << "grad_q";
  EXPECT_TRUE(at::allclose(grad_k, want_k, 1e-10, 1e-10)) << "grad_k";
  EXPECT_TRUE(at::allclose(grad_v, want_v, 1e-10, 1e-10)) << "grad_v";

  if (!lengths.has_value()) return;
  // NaN behind the key padding (and, where FA2 leaves the padding queries out, behind them too): no result changes.
  using mma_nmt::testing::expect_untouched_by_padding;
  using mma_nmt::testing::with_nan_padding;
  const at::Tensor nan_q = q.masked_fill(left_out.unsqueeze(-1), kNaN);
  const at::Tensor nan_k = with_nan_padding(k, *lengths), nan_v = with_nan_padding(v, *lengths);
  const at::Tensor nan_grad_out = x.grad_out.masked_fill(left_out.unsqueeze(-1), kNaN);
  const auto [n_out, n_lse, n_probs] =
      mma_nmt::attention::flash_forward_per_kind(p, nan_q, nan_k, nan_v, lengths, kernels);
  expect_untouched_by_padding(n_out, out, "out");
  const auto [n_q, n_k, n_v] = mma_nmt::attention::flash_backward_per_kind(p, nan_grad_out, nan_q, nan_k, nan_v,
                                                                               n_out, n_lse, lengths, kernels);
  expect_untouched_by_padding(n_q, grad_q, "grad_q");
  expect_untouched_by_padding(n_k, grad_k, "grad_k");
  expect_untouched_by_padding(n_v, grad_v, "grad_v");
}

INSTANTIATE_TEST_SUITE_P(Cases, FlashCallsMatchCpuKernel, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

TEST(FlashSequences, TheGroupsOfOneCallShareTheSequencesOfItsBatch) {
  // GLFB padded self-attention: four groups over the same sentences. Sharing the call's cache, they compute the
  // sequence starts once (one kernel) and the same results.
  at::manual_seed(31);
  const Inputs x = head_views(3, 4, 7, 7, 8);
  const std::optional<at::Tensor> lengths = at::tensor(std::vector<int64_t>{7, 1, 0});
  const std::vector<int64_t> kinds{kind_of('G'), kind_of('L'), kind_of('F'), kind_of('B')};
  const AttentionParams p =
      mma_nmt::attention::check_attention_args("test", x.q, x.k, x.v, lengths, kinds, 1, 0.3, 0, 0.0, 0, true);
  const auto starts = [](const DispatchCount& c) {
    const auto it = c.by_name.find("mma_nmt::flash_sequence_starts");
    return it == c.by_name.end() ? int64_t{0} : it->second;
  };
  int groups = 0;
  Triple results[2], grads[2];
  DispatchCount forward[2], backward[2];
  for (const int shared : {0, 1}) {
    FlashSequenceCache forward_cache, backward_cache;  // one per call, as attention_cuda.cpp makes them
    forward[shared] = mma_nmt::testing::count(
        [&] {
          results[shared] = mma_nmt::attention::flash_forward_per_kind(
              p, x.q, x.k, x.v, lengths, flash_or_cpu(&groups, shared ? &forward_cache : nullptr));
        },
        int64_t{1} << 40);
    const auto& [out, lse, probs] = results[shared];
    backward[shared] = mma_nmt::testing::count(
        [&] {
          grads[shared] = mma_nmt::attention::flash_backward_per_kind(
              p, x.grad_out, x.q, x.k, x.v, out, lse, lengths,
              flash_or_cpu(&groups, shared ? &backward_cache : nullptr));
        },
        int64_t{1} << 40);
  }
  EXPECT_EQ(groups, 8);  // FA2 took the 4 groups, in both runs
  EXPECT_EQ(starts(forward[0]), 4);  // each group its own
  EXPECT_EQ(starts(backward[0]), 4);
  EXPECT_EQ(starts(forward[1]), 1);  // once for the call: the keys', every query's (G) and the real queries' (L, F, B)
  EXPECT_EQ(starts(backward[1]), 1);
  EXPECT_LT(forward[1].ops, forward[0].ops);
  EXPECT_LT(backward[1].ops, backward[0].ops);
  EXPECT_TRUE(at::equal(std::get<0>(results[0]), std::get<0>(results[1])));
  EXPECT_TRUE(at::equal(std::get<1>(results[0]), std::get<1>(results[1])));
  const auto& [own_q, own_k, own_v] = grads[0];
  const auto& [shared_q, shared_k, shared_v] = grads[1];
  EXPECT_TRUE(at::equal(own_q, shared_q) && at::equal(own_k, shared_k) && at::equal(own_v, shared_v));
  std::cout << "[ sequences] GLFB padded, 4 groups, unshared -> shared: forward " << forward[0].ops << " -> "
            << forward[1].ops << " ops, backward " << backward[0].ops << " -> " << backward[1].ops << "\n";
}

// ---- the ATen ops around FA2 (issue 48, point 5) -----------------------------------------------------------------
// Counted as tests/cpp/test_dispatch_budget.cpp counts the compositions (dispatch_budget.h), each FA2 call one op:
// B 2, D 4, one sentence 11 keys short, every group through FA2 (attention_cuda.cpp's path for half-precision calls
// FA2 takes: long ones by default, every size with MMA_NMT_CUDA_KERNELS=flash). No buffer of B x T x S elements. The
// targets are the composition's (test_dispatch_budget.cpp). Counted with torch 2.13.0+cpu. Where the ops go in a
// padded call: the sequence starts, one kernel per call (mma_nmt::flash_sequence_starts), then FA2 per group and the
// call's lse in our layout with -inf for the rows without keys (one nan_to_num, flash_forward_per_kind) forward, the
// call's lse in FA2's layout (one copy, flash_backward_per_kind) and FA2 per group backward; a mixed call joins its
// groups' results by one cat each (out and lse forward, the three gradients backward).
// History of the GLFB count (forward / backward): 88 / 138 until 2026-12-01, when the padded batch was packed
// (index_copy) and unpacked (index_select, masked_fill) around FA2; 37 / 38 until 2026-12-02, when about a dozen small
// ops built the starts (clamp, arange, adds, cat, pad), two the lse's rows without keys, and a copy per group and
// result put the groups' results back (all G and all C padded: 15-17 / 13-14).
struct FlashBudgetCase {
  std::string name;
  std::string kinds;
  int64_t query_len, key_len;
  bool padded;
  mma_nmt::testing::Budget forward, backward;
};

void PrintTo(const FlashBudgetCase& c, std::ostream* os) { *os << c.name; }

const FlashBudgetCase kFlashBudgets[] = {
    {"GLFBSelfAttentionPadded", "GLFB", 32, 32, true, {8, 0, 8}, {9, 0, 18}},
    {"AllGlobalCrossAttentionPadded", "GGGG", 24, 32, true, {3, 0, 3}, {3, 0, 6}},
    {"AllCausalSelfAttentionPadded", "CCCC", 32, 32, true, {3, 0, 3}, {3, 0, 6}},
    {"AllCausalSelfAttentionUnpadded", "CCCC", 32, 32, false, {1, 0, 3}, {1, 0, 6}},
};

class FlashPathBudget : public ::testing::TestWithParam<FlashBudgetCase> {};

TEST_P(FlashPathBudget, ForwardAndBackwardWithinBudget) {
  const FlashBudgetCase& c = GetParam();
  at::manual_seed(5);
  const int64_t batch = 2, heads = static_cast<int64_t>(c.kinds.size()), dim = 4;
  const int64_t large = mma_nmt::testing::attention_large_numel(batch, heads, c.query_len, c.key_len, dim);
  const Inputs x = head_views(batch, heads, c.query_len, c.key_len, dim);
  const std::optional<at::Tensor> lengths =
      c.padded ? std::optional<at::Tensor>(at::tensor(std::vector<int64_t>{c.key_len, c.key_len - 11})) : std::nullopt;
  std::vector<int64_t> kinds;
  for (const char letter : c.kinds) kinds.push_back(kind_of(letter));
  const AttentionParams p =
      mma_nmt::attention::check_attention_args("test", x.q, x.k, x.v, lengths, kinds, 1, 0.5, 0, 0.0, 0,
                                               /*self_attention=*/c.query_len == c.key_len);  // as the encoder's
  int groups = 0;
  FlashSequenceCache forward_cache, backward_cache;
  Triple result;
  const DispatchCount f = mma_nmt::testing::count(
      [&] {
        result = mma_nmt::attention::flash_forward_per_kind(p, x.q, x.k, x.v, lengths,
                                                                flash_or_cpu(&groups, &forward_cache));
      },
      large);
  const auto& [out, lse, probs] = result;
  const DispatchCount b = mma_nmt::testing::count(
      [&] {
        (void)mma_nmt::attention::flash_backward_per_kind(p, x.grad_out, x.q, x.k, x.v, out, lse, lengths,
                                                              flash_or_cpu(&groups, &backward_cache));
      },
      large);
  std::set<char> distinct(c.kinds.begin(), c.kinds.end());
  EXPECT_EQ(groups, static_cast<int>(distinct.size())) << "every group through FA2";
  mma_nmt::testing::expect_within(f, c.forward, (c.name + " forward").c_str());
  mma_nmt::testing::expect_within(b, c.backward, (c.name + " backward").c_str());
  EXPECT_TRUE(f.large_outputs.empty() && b.large_outputs.empty());
}

INSTANTIATE_TEST_SUITE_P(Cases, FlashPathBudget, ::testing::ValuesIn(kFlashBudgets),
                         [](const ::testing::TestParamInfo<FlashBudgetCase>& info) { return info.param.name; });

}  // namespace
