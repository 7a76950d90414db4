// The CUDA kernels of mma_nmt::gmm_attention (gmm_kernels.cuh, gmm_backward_kernels.cuh, launched by gmm_launch.cuh)
// under the HIP CPU emulator against the CPU operator: every normalisation, with and without the localness bias,
// padding with a length-1 and an empty sentence (fully masked rows), T = 1 and T != S, odd head sizes, more keys than
// lanes and more rows than a block takes, all dtypes; each case through the one-warp-per-row kernels and through the
// block-per-head kernels (gmm_block_kernels.cuh); and head views of projections read in place.
#include "emulated_testing.h"  // first: torch's headers before HIP's

#include <ATen/core/dispatch/Dispatcher.h>

#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "../dispatch_budget.h"
#include "gmm/cuda/gmm_launch.cuh"
#include "gmm/gmm_math.h"

namespace mma_nmt::emulated {
namespace {

using gmm::GmmBackwardResult;
using gmm::GmmForwardResult;

struct GmmCase {
  std::string name;
  int64_t batch, heads, query_len, key_len, head_dim, value_dim, components;
  int64_t normalization;
  bool local_bias;
  std::vector<int64_t> key_lengths;  // empty: no padding
};

// gtest prints a failing case by its name.
void PrintTo(const GmmCase& c, std::ostream* os) { *os << c.name; }

const GmmCase kCases[] = {
    {"ApproximateLengthOneAndEmptySentence", 3, 2, 4, 6, 5, 3, 2, gmm::kApproximate, false, {6, 1, 0}},
    {"StrictWithLocalBiasTNotS", 2, 2, 5, 9, 33, 7, 3, gmm::kStrict, true, {9, 4}},
    {"UnnormalisedSingleQueryStep", 2, 3, 1, 7, 8, 9, 1, gmm::kUnnormalised, false, {7, 3}},
    {"StrictLocalBiasWideHeads", 1, 1, 3, 4, 130, 40, 2, gmm::kStrict, true, {}},
    {"ApproximateManyKeysAndRows", 2, 2, 37, 70, 16, 12, 4, gmm::kApproximate, false, {70, 33}},
    {"StrictLocalBiasManyKeys", 1, 2, 9, 45, 8, 6, 3, gmm::kStrict, true, {44}},
};

using ForwardFn = GmmForwardResult(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                   const std::optional<at::Tensor>&, const at::Tensor&, const at::Tensor&,
                                   const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
                                   const std::optional<at::Tensor>&, double, int64_t, double, bool);
using BackwardFn = GmmBackwardResult(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                     const std::optional<at::Tensor>&, const at::Tensor&, const at::Tensor&,
                                     const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
                                     const std::optional<at::Tensor>&, const at::Tensor&, const at::Tensor&,
                                     const at::Tensor&, const at::Tensor&, double, int64_t, double);

constexpr double kScale = 0.3;
constexpr double kSigmaFloor = 0.5;

// The mixture and gate inputs, in the dtype under test: positive weights, means over the sentence, sigmas on both
// sides of the floor, gates in (0, 1).
struct MixtureInputs {
  at::Tensor omega, mu, sigma, gate;
  std::optional<at::Tensor> center, width;
};

MixtureInputs random_mixture(const GmmCase& c, const DtypeCase& dtype) {
  const auto opts = at::TensorOptions().dtype(at::kDouble);
  const std::vector<int64_t> rows{c.batch, c.heads, c.query_len};
  const std::vector<int64_t> components{c.batch, c.heads, c.query_len, c.components};
  MixtureInputs m;
  m.omega = at::rand(components, opts).add(0.1).to(dtype.dtype);
  m.mu = (at::rand(components, opts) * c.key_len).to(dtype.dtype);
  m.sigma = (at::rand(components, opts) * 3.0 + 0.2).to(dtype.dtype);
  m.gate = at::rand(rows, opts).to(dtype.dtype);
  if (c.local_bias) {
    m.center = (at::rand(rows, opts) * c.key_len).to(dtype.dtype);
    m.width = (at::rand(rows, opts) * 2.0 + 0.3).to(dtype.dtype);
  }
  return m;
}

std::optional<at::Tensor> optional_to(const std::optional<at::Tensor>& t, at::ScalarType dtype) {
  return t.has_value() ? std::optional<at::Tensor>(t->to(dtype)) : std::nullopt;
}

const char* const kForwardOutputs[] = {"out", "lse", "log_mass", "alpha_context", "beta_context", "alpha", "beta"};
const char* const kBackwardOutputs[] = {"grad_q",     "grad_k",    "grad_v",          "grad_omega",     "grad_mu",
                                        "grad_sigma", "grad_gate", "grad_local_center", "grad_local_width"};

template <typename Tuple, size_t... I>
std::vector<at::Tensor> as_vector(const Tuple& tuple, std::index_sequence<I...>) {
  return {std::get<I>(tuple)...};
}

using gmm::cuda::GmmKernels;

// grad_local_center and grad_local_width of the CPU operator run in float64 on the same inputs.
std::vector<at::Tensor> local_bias_grads_in_float64(const GmmCase& c, const at::Tensor& q, const at::Tensor& k,
                                                    const at::Tensor& v, const at::Tensor& grad_out,
                                                    const std::optional<at::Tensor>& lengths, const MixtureInputs& m) {
  const at::ScalarType d = at::kDouble;
  const auto forward = c10::Dispatcher::singleton().findSchemaOrThrow("mma_nmt::gmm_attention", "").typed<ForwardFn>();
  const auto backward =
      c10::Dispatcher::singleton().findSchemaOrThrow("mma_nmt::gmm_attention_backward", "").typed<BackwardFn>();
  const auto [out, lse, log_mass, ctx_a, ctx_b, alpha, beta] =
      forward.call(q.to(d), k.to(d), v.to(d), lengths, m.omega.to(d), m.mu.to(d), m.sigma.to(d), m.gate.to(d),
                   optional_to(m.center, d), optional_to(m.width, d), kScale, c.normalization, kSigmaFloor, false);
  const GmmBackwardResult grads =
      backward.call(grad_out.to(d), q.to(d), k.to(d), v.to(d), lengths, m.omega.to(d), m.mu.to(d), m.sigma.to(d),
                    m.gate.to(d), optional_to(m.center, d), optional_to(m.width, d), lse, log_mass, ctx_a, ctx_b,
                    kScale, c.normalization, kSigmaFloor);
  return {std::get<7>(grads), std::get<8>(grads)};
}

// A case's random inputs in the dtype under test.
struct CaseInputs {
  at::Tensor q, k, v, grad_out;
  MixtureInputs m;
  std::optional<at::Tensor> lengths;
};

CaseInputs random_inputs(const GmmCase& c, const DtypeCase& dtype) {
  CaseInputs in;
  in.q = random_input({c.batch, c.heads, c.query_len, c.head_dim}, dtype);
  in.k = random_input({c.batch, c.heads, c.key_len, c.head_dim}, dtype);
  in.v = random_input({c.batch, c.heads, c.key_len, c.value_dim}, dtype);
  in.grad_out = random_input({c.batch, c.heads, c.query_len, c.value_dim}, dtype);
  in.m = random_mixture(c, dtype);
  if (!c.key_lengths.empty()) in.lengths = at::tensor(c.key_lengths);
  return in;
}

class EmulatedGmm : public ::testing::TestWithParam<std::tuple<GmmCase, DtypeCase, GmmKernels>> {};

TEST_P(EmulatedGmm, ForwardAndBackwardMatchCpuOperator) {
  const auto& [c, dtype, kernels] = GetParam();
  at::manual_seed(11);
  const auto [q, k, v, grad_out, m, lengths] = random_inputs(c, dtype);
  const at::ScalarType rt = dtype.reference_dtype;

  const auto forward = c10::Dispatcher::singleton().findSchemaOrThrow("mma_nmt::gmm_attention", "").typed<ForwardFn>();
  const GmmForwardResult cpu =
      forward.call(q.to(rt), k.to(rt), v.to(rt), lengths, m.omega.to(rt), m.mu.to(rt), m.sigma.to(rt), m.gate.to(rt),
                   optional_to(m.center, rt), optional_to(m.width, rt), kScale, c.normalization, kSigmaFloor, true);
  const gmm::LocalBias local{m.center, m.width};
  const gmm::GmmParams p = gmm::check_gmm_args("emulated gmm", q, k, v, lengths, m.omega, m.mu, m.sigma, m.gate,
                                               local, kScale, c.normalization, kSigmaFloor);
  gmm::cuda::Inputs in = gmm::cuda::kernel_inputs(q, k, v, lengths, m.omega, m.mu, m.sigma, m.gate, local);
  const GmmForwardResult emu = gmm::cuda::run_gmm_forward(p, in, true, emulated_launch(), kernels);
  const auto cpu_outputs = as_vector(cpu, std::make_index_sequence<7>());
  const auto emu_outputs = as_vector(emu, std::make_index_sequence<7>());
  for (size_t i = 0; i < cpu_outputs.size(); ++i) {
    expect_close(emu_outputs[i], cpu_outputs[i], dtype, "gmm_forward", kForwardOutputs[i]);
  }

  const auto& [out, lse, log_mass, ctx_a, ctx_b, alpha, beta] = cpu;
  const auto backward =
      c10::Dispatcher::singleton().findSchemaOrThrow("mma_nmt::gmm_attention_backward", "").typed<BackwardFn>();
  const GmmBackwardResult cpu_grads =
      backward.call(grad_out.to(rt), q.to(rt), k.to(rt), v.to(rt), lengths, m.omega.to(rt), m.mu.to(rt),
                    m.sigma.to(rt), m.gate.to(rt), optional_to(m.center, rt), optional_to(m.width, rt), lse, log_mass,
                    ctx_a, ctx_b, kScale, c.normalization, kSigmaFloor);
  in.dout = grad_out.contiguous();
  const GmmBackwardResult emu_grads =
      gmm::cuda::run_gmm_backward(p, in, {lse, log_mass, ctx_a, ctx_b}, emulated_launch(), kernels);
  const auto cpu_grad_list = as_vector(cpu_grads, std::make_index_sequence<9>());
  const auto emu_grad_list = as_vector(emu_grads, std::make_index_sequence<9>());
  for (size_t i = 0; i < cpu_grad_list.size() - 2; ++i) {
    expect_close(emu_grad_list[i], cpu_grad_list[i], dtype, "gmm_backward", kBackwardOutputs[i]);
  }
  // The local-bias gradients sum d logit_j (j - center)^k over the keys, terms that cancel: in float32 any order of
  // summation is ~1e-5 from the exact value (the CPU operator's too), so they are held to the CPU operator's accuracy.
  const std::vector<at::Tensor> exact = local_bias_grads_in_float64(c, q, k, v, grad_out, lengths, m);
  for (size_t i = cpu_grad_list.size() - 2; i < cpu_grad_list.size(); ++i) {
    if (dtype.dtype == at::kFloat) {
      expect_as_accurate_as_cpu(emu_grad_list[i], cpu_grad_list[i], exact[i - 7], dtype, "gmm_backward",
                                kBackwardOutputs[i]);
    } else {
      expect_close(emu_grad_list[i], cpu_grad_list[i], dtype, "gmm_backward", kBackwardOutputs[i]);
    }
  }
}

// A launch and the kernels it forces.
struct KernelRun {
  gpu::Launch launch;
  GmmKernels kernels;
};

// Holds every output and gradient of the `actual` run to those of the `expected` run; both backwards read the expected
// run's saved statistics.
void expect_runs_agree(const gmm::GmmParams& p, gmm::cuda::Inputs in, const at::Tensor& grad_out,
                       const DtypeCase& dtype, const KernelRun& expected, const KernelRun& actual,
                       const std::string& label) {
  const GmmForwardResult want = gmm::cuda::run_gmm_forward(p, in, true, expected.launch, expected.kernels);
  const GmmForwardResult got = gmm::cuda::run_gmm_forward(p, in, true, actual.launch, actual.kernels);
  const auto want_outputs = as_vector(want, std::make_index_sequence<7>());
  const auto got_outputs = as_vector(got, std::make_index_sequence<7>());
  for (size_t i = 0; i < want_outputs.size(); ++i) {
    expect_close(got_outputs[i], want_outputs[i], dtype, "gmm_forward " + label, kForwardOutputs[i]);
  }
  const auto& [out, lse, log_mass, ctx_a, ctx_b, alpha, beta] = want;
  in.dout = grad_out.contiguous();
  const gmm::cuda::SavedStatistics saved{lse, log_mass, ctx_a, ctx_b};
  const auto want_grads = as_vector(gmm::cuda::run_gmm_backward(p, in, saved, expected.launch, expected.kernels),
                                    std::make_index_sequence<9>());
  const auto got_grads = as_vector(gmm::cuda::run_gmm_backward(p, in, saved, actual.launch, actual.kernels),
                                   std::make_index_sequence<9>());
  for (size_t i = 0; i < want_grads.size(); ++i) {
    expect_close(got_grads[i], want_grads[i], dtype, "gmm_backward " + label, kBackwardOutputs[i]);
  }
}

// The block-per-head kernels with 4 warps a block, as the GPU launches them: the warps share the staged keys and take
// rows 4 at a time. The emulator needs every warp of a block on the same path (its shuffles and warp_sync synchronise
// the block), which holds when the rows fill whole blocks (T a multiple of 4 warps x kBlockRowsPerWarp).
TEST(EmulatedGmmHeadBlocks, FourWarpsPerBlockMatchCpuOperator) {
  const GmmCase c{"FourWarps", 2, 2, 32, 21, 12, 10, 3, gmm::kStrict, true, {21, 5}};
  const DtypeCase dtype = kFloat64;
  at::manual_seed(5);
  const auto [q, k, v, grad_out, m, lengths] = random_inputs(c, dtype);
  const gmm::LocalBias local{m.center, m.width};
  const gmm::GmmParams p = gmm::check_gmm_args("emulated gmm", q, k, v, lengths, m.omega, m.mu, m.sigma, m.gate,
                                               local, kScale, c.normalization, kSigmaFloor);
  gmm::cuda::Inputs in = gmm::cuda::kernel_inputs(q, k, v, lengths, m.omega, m.mu, m.sigma, m.gate, local);
  const KernelRun one_warp{emulated_launch(), GmmKernels::kHeadBlocks};
  expect_runs_agree(p, in, grad_out, dtype, one_warp, {gpu::Launch{nullptr, 4}, GmmKernels::kHeadBlocks}, "4 warps");
}

// Head views of projections, as the GMM module passes them (q alone, k and v from one fused projection, NaN in the
// other set), give bit for bit the results of contiguous inputs; out comes back position-major and the gradients of
// q, k and v laid out like their inputs, which the fake kernel promises (mma_nmt/ops/gmm_attention.py).
class EmulatedGmmHeadViews : public ::testing::TestWithParam<GmmKernels> {};

TEST_P(EmulatedGmmHeadViews, ReadHeadViewsInPlaceAndReturnTheFakeKernelsLayouts) {
  const GmmCase c{"HeadViews", 2, 3, 5, 9, 8, 8, 3, gmm::kStrict, true, {9, 4}};
  const DtypeCase dtype = kFloat64;
  at::manual_seed(23);
  const auto [q, k, v, grad_out, m, lengths] = random_inputs(c, dtype);
  const at::Tensor q_view = head_view(q, 1, 0), k_view = head_view(k, 2, 0), v_view = head_view(v, 2, 1);
  const at::Tensor grad_view = head_view(grad_out, 1, 0);
  ASSERT_FALSE(k_view.is_contiguous() || q_view.is_contiguous() || grad_view.is_contiguous());
  const gmm::LocalBias local{m.center, m.width};
  const gmm::GmmParams p = gmm::check_gmm_args("emulated gmm", q, k, v, lengths, m.omega, m.mu, m.sigma, m.gate,
                                               local, kScale, c.normalization, kSigmaFloor);
  const GmmKernels kernels = GetParam();
  gmm::cuda::Inputs dense = gmm::cuda::kernel_inputs(q, k, v, lengths, m.omega, m.mu, m.sigma, m.gate, local);
  gmm::cuda::Inputs views =
      gmm::cuda::kernel_inputs(q_view, k_view, v_view, lengths, m.omega, m.mu, m.sigma, m.gate, local);
  EXPECT_EQ(views.k.data_ptr(), k_view.data_ptr());  // read in place, no copy
  const auto dense_out = as_vector(gmm::cuda::run_gmm_forward(p, dense, false, emulated_launch(), kernels),
                                   std::make_index_sequence<7>());
  const auto view_out = as_vector(gmm::cuda::run_gmm_forward(p, views, false, emulated_launch(), kernels),
                                  std::make_index_sequence<7>());
  for (size_t i = 0; i < 5; ++i) EXPECT_TRUE(at::equal(view_out[i], dense_out[i])) << kForwardOutputs[i];
  EXPECT_TRUE(is_position_major(view_out[0]) && is_position_major(dense_out[0])) << view_out[0].strides();
  dense.dout = grad_out;
  views.dout = grad_view;
  const gmm::cuda::SavedStatistics saved{dense_out[1], dense_out[2], dense_out[3], dense_out[4]};
  const auto dense_grads = as_vector(gmm::cuda::run_gmm_backward(p, dense, saved, emulated_launch(), kernels),
                                     std::make_index_sequence<9>());
  const auto view_grads = as_vector(gmm::cuda::run_gmm_backward(p, views, saved, emulated_launch(), kernels),
                                    std::make_index_sequence<9>());
  for (size_t i = 0; i < view_grads.size(); ++i) {
    EXPECT_TRUE(at::equal(view_grads[i], dense_grads[i])) << kBackwardOutputs[i];
  }
  EXPECT_TRUE(dense_grads[0].is_contiguous() && dense_grads[1].is_contiguous() && dense_grads[2].is_contiguous());
  EXPECT_EQ(view_grads[0].strides(), q_view.strides());  // q's view is dense: its own strides
  EXPECT_TRUE(is_position_major(view_grads[1]) && is_position_major(view_grads[2])) << view_grads[1].strides();
}

INSTANTIATE_TEST_SUITE_P(Kernels, EmulatedGmmHeadViews,
                         ::testing::Values(GmmKernels::kRowWarps, GmmKernels::kHeadBlocks),
                         [](const ::testing::TestParamInfo<GmmKernels>& info) {
                           return info.param == GmmKernels::kHeadBlocks ? "HeadBlocks" : "RowWarps";
                         });

// The ATen work each kernel family dispatches around its launches (issue 49: at most 3 launches a direction on the
// fast path), counted as test_dispatch_budget.cpp counts (dispatch_budget.h: allocations and views are free). The
// forward adds nothing to its one kernel and the one-warp-per-row backward nothing to its two; the block-per-head
// backward adds its two batched GEMMs (3 launches), and with the module's head views one copy per GEMM into the
// gradient of k and of v, whose heads do not fold into a GEMM's batch (the kernel itself leaves q's and grad_out's
// rows for the GEMMs, so nothing gathers them). No zero fill anywhere: the kernels write every element of their
// results, the padding keys' zero gradients included.
TEST(EmulatedGmmLaunches, NoAtenWorkBesideTheKernelsButTheBlockBackwardsGemms) {
  const GmmCase c{"Launches", 2, 2, 6, 9, 8, 8, 2, gmm::kApproximate, false, {9, 4}};
  at::manual_seed(3);
  const auto [q, k, v, grad_out, m, lengths] = random_inputs(c, kFloat64);
  const gmm::GmmParams p = gmm::check_gmm_args("emulated gmm", q, k, v, lengths, m.omega, m.mu, m.sigma, m.gate, {},
                                               kScale, c.normalization, kSigmaFloor);
  const std::map<std::string, int64_t> nothing, gemms{{"aten::bmm", 2}}, gemms_and_copies{{"aten::bmm", 2},
                                                                                          {"aten::copy_", 2}};
  for (const bool views : {false, true}) {
    gmm::cuda::Inputs in =
        views ? gmm::cuda::kernel_inputs(head_view(q, 1, 0), head_view(k, 2, 0), head_view(v, 2, 1), lengths,
                                         m.omega, m.mu, m.sigma, m.gate, {})
              : gmm::cuda::kernel_inputs(q, k, v, lengths, m.omega, m.mu, m.sigma, m.gate, {});
    in.dout = views ? head_view(grad_out, 1, 0) : grad_out;
    for (const GmmKernels kernels : {GmmKernels::kHeadBlocks, GmmKernels::kRowWarps}) {
      const bool blocks = kernels == GmmKernels::kHeadBlocks;
      const std::string what = std::string(blocks ? "head blocks" : "row warps") + (views ? ", head views" : "");
      testing::DispatchCount forward, backward;
      std::optional<GmmForwardResult> outputs;
      {
        testing::DispatchCounter counter(forward, 1 << 30);
        outputs = gmm::cuda::run_gmm_forward(p, in, false, emulated_launch(), kernels);
      }
      const auto& [out, lse, log_mass, ctx_a, ctx_b, alpha, beta] = *outputs;
      {
        testing::DispatchCounter counter(backward, 1 << 30);
        (void)gmm::cuda::run_gmm_backward(p, in, {lse, log_mass, ctx_a, ctx_b}, emulated_launch(), kernels);
      }
      EXPECT_EQ(forward.ops, 0) << what;
      EXPECT_EQ(backward.by_name, blocks ? (views ? gemms_and_copies : gemms) : nothing)
          << what << ": " << backward.ops << " ops";
    }
  }
}

// The mixture in float32 beside float16/bfloat16 q, k and v (what CUDA autocast hands the operator: mma_nmt/ops/
// autocast.py): both kernel families read it and write its gradients in float32, q, k and v's in their dtype, and
// match the CPU operator run on the same values in float32.
class EmulatedGmmWideMixture : public ::testing::TestWithParam<std::tuple<DtypeCase, GmmKernels>> {};

TEST_P(EmulatedGmmWideMixture, ReadsAndWritesTheMixtureInFloat32) {
  const auto& [dtype, kernels] = GetParam();
  const GmmCase c{"WideMixture", 2, 2, 6, 11, 8, 6, 3, gmm::kStrict, true, {11, 1}};
  at::manual_seed(31);
  CaseInputs in = random_inputs(c, dtype);
  in.m = random_mixture(c, kFloat32);
  const auto& [q, k, v, grad_out, m, lengths] = in;
  const at::ScalarType rt = at::kFloat;
  const gmm::LocalBias local{m.center, m.width};
  const gmm::GmmParams p = gmm::check_gmm_args("emulated gmm", q, k, v, lengths, m.omega, m.mu, m.sigma, m.gate,
                                               local, kScale, c.normalization, kSigmaFloor);
  ASSERT_TRUE(p.wide_mixture);
  const auto forward = c10::Dispatcher::singleton().findSchemaOrThrow("mma_nmt::gmm_attention", "").typed<ForwardFn>();
  const auto backward =
      c10::Dispatcher::singleton().findSchemaOrThrow("mma_nmt::gmm_attention_backward", "").typed<BackwardFn>();
  const GmmForwardResult cpu = forward.call(q.to(rt), k.to(rt), v.to(rt), lengths, m.omega, m.mu, m.sigma, m.gate,
                                            m.center, m.width, kScale, c.normalization, kSigmaFloor, true);
  gmm::cuda::Inputs kin = gmm::cuda::kernel_inputs(q, k, v, lengths, m.omega, m.mu, m.sigma, m.gate, local);
  const auto emu = as_vector(gmm::cuda::run_gmm_forward(p, kin, true, emulated_launch(), kernels),
                             std::make_index_sequence<7>());
  const auto cpu_outputs = as_vector(cpu, std::make_index_sequence<7>());
  for (size_t i = 0; i < emu.size(); ++i) {
    expect_close(emu[i], cpu_outputs[i], dtype, "gmm_forward wide mixture", kForwardOutputs[i]);
  }
  EXPECT_EQ(emu[0].scalar_type(), dtype.dtype);
  const auto& [out, lse, log_mass, ctx_a, ctx_b, alpha, beta] = cpu;
  const auto cpu_grads = as_vector(
      backward.call(grad_out.to(rt), q.to(rt), k.to(rt), v.to(rt), lengths, m.omega, m.mu, m.sigma, m.gate, m.center,
                    m.width, lse, log_mass, ctx_a, ctx_b, kScale, c.normalization, kSigmaFloor),
      std::make_index_sequence<9>());
  kin.dout = grad_out;
  const auto emu_grads =
      as_vector(gmm::cuda::run_gmm_backward(p, kin, {lse, log_mass, ctx_a, ctx_b}, emulated_launch(), kernels),
                std::make_index_sequence<9>());
  for (size_t i = 0; i < emu_grads.size(); ++i) {
    EXPECT_EQ(emu_grads[i].scalar_type(), i < 3 ? dtype.dtype : at::kFloat) << kBackwardOutputs[i];
    expect_close(emu_grads[i], cpu_grads[i], dtype, "gmm_backward wide mixture", kBackwardOutputs[i]);
  }
}

INSTANTIATE_TEST_SUITE_P(HalfPrecision, EmulatedGmmWideMixture,
                         ::testing::Combine(::testing::Values(kFloat16, kBFloat16),
                                            ::testing::Values(GmmKernels::kRowWarps, GmmKernels::kHeadBlocks)),
                         [](const ::testing::TestParamInfo<std::tuple<DtypeCase, GmmKernels>>& info) {
                           const bool blocks = std::get<1>(info.param) == GmmKernels::kHeadBlocks;
                           return dtype_name(std::get<0>(info.param).dtype) + (blocks ? "_HeadBlocks" : "_RowWarps");
                         });

// Why the mixture stays in float32: a mean far into a long sentence, rounded to bfloat16 (8 significant bits), moves
// by up to a whole position, and a narrow component then weighs other keys. With the float32 mixture the kernels'
// mixture context (beta v) matches the CPU operator's on the unrounded mixture to bfloat16's tolerance; with the
// mixture rounded to bfloat16 it does not.
TEST(EmulatedGmmWideMixture, KeepsMeansFarIntoALongSentenceWhereBfloat16WouldMoveThem) {
  const GmmCase c{"FarMeans", 1, 2, 4, 300, 8, 8, 2, gmm::kApproximate, false, {}};
  at::manual_seed(37);
  CaseInputs in = random_inputs(c, kBFloat16);
  MixtureInputs& m = in.m;
  m = random_mixture(c, kFloat32);
  m.mu = at::rand(m.mu.sizes(), m.mu.options()) * 40.0 + 258.0;  // in (258, 298): bfloat16 steps of 2 there
  m.sigma = at::full_like(m.sigma, 0.6);
  const gmm::GmmParams p = gmm::check_gmm_args("emulated gmm", in.q, in.k, in.v, in.lengths, m.omega, m.mu, m.sigma,
                                               m.gate, {}, kScale, c.normalization, kSigmaFloor);
  const auto forward = c10::Dispatcher::singleton().findSchemaOrThrow("mma_nmt::gmm_attention", "").typed<ForwardFn>();
  const at::Tensor exact = std::get<4>(forward.call(in.q.to(at::kFloat), in.k.to(at::kFloat), in.v.to(at::kFloat),
                                                    in.lengths, m.omega, m.mu, m.sigma, m.gate, std::nullopt,
                                                    std::nullopt, kScale, c.normalization, kSigmaFloor, false));
  const auto beta_context = [&](const MixtureInputs& mixture) {
    const gmm::GmmParams call = gmm::check_gmm_args("emulated gmm", in.q, in.k, in.v, in.lengths, mixture.omega,
                                                    mixture.mu, mixture.sigma, mixture.gate, {}, kScale,
                                                    c.normalization, kSigmaFloor);
    const gmm::cuda::Inputs kin = gmm::cuda::kernel_inputs(in.q, in.k, in.v, in.lengths, mixture.omega, mixture.mu,
                                                           mixture.sigma, mixture.gate, {});
    return std::get<4>(gmm::cuda::run_gmm_forward(call, kin, false, emulated_launch(), GmmKernels::kHeadBlocks));
  };
  ASSERT_TRUE(p.wide_mixture);
  expect_close(beta_context(m), exact, kBFloat16, "gmm_forward far means", "beta_context");
  const MixtureInputs rounded{m.omega.to(at::kBFloat16), m.mu.to(at::kBFloat16), m.sigma.to(at::kBFloat16),
                              m.gate.to(at::kBFloat16), std::nullopt, std::nullopt};
  EXPECT_GT(scaled_max_error(beta_context(rounded), exact), 10 * kBFloat16.tolerance)
      << "rounding the means to bfloat16 should move the mixture's weight";
}

// GMM's size rule on the GPU (4 warps a block): where the block-per-head kernels fit, every dtype runs them by
// default; beyond, every dtype takes the composition (gmm_cuda.cu; float32 and float64 only until 2026-12-03, half
// precision the one-warp-per-row kernels). Decoder sizes (S = 64, D = 64,
// K = 4) fit in every dtype but float64; a 128-key source still fits in bfloat16 and no longer in float32.
TEST(EmulatedGmmHeadBlocks, FitDecoderSizesInFloat32AndLongerSourcesInHalfPrecision) {
  gmm::GmmParams p;
  p.batch = 64, p.heads = 8, p.head_dim = 64, p.value_dim = 64, p.components = 4;
  const gpu::Launch gpu_launch{nullptr, 4};
  for (const bool backward : {false, true}) {
    p.query_len = p.key_len = 64;
    EXPECT_TRUE(gmm::cuda::head_blocks_fit(p, at::kFloat, backward, gpu_launch)) << backward;
    EXPECT_TRUE(gmm::cuda::head_blocks_fit(p, at::kBFloat16, backward, gpu_launch)) << backward;
    EXPECT_FALSE(gmm::cuda::head_blocks_fit(p, at::kDouble, backward, gpu_launch)) << backward;
    p.query_len = p.key_len = 128;
    EXPECT_FALSE(gmm::cuda::head_blocks_fit(p, at::kFloat, backward, gpu_launch)) << backward;
    EXPECT_TRUE(gmm::cuda::head_blocks_fit(p, at::kBFloat16, backward, gpu_launch)) << backward;
    EXPECT_TRUE(gmm::cuda::head_blocks_fit(p, at::kHalf, backward, gpu_launch)) << backward;
  }
}

// Past 48 KiB: Launch::shared_limit decides the fit (MMA_NMT_CUDA_KERNELS=handwritten gives the block-per-head kernels
// the device's opt-in maximum, gmm_cuda.cu: 227 KiB on sm90). With it a 256-key source fits in float32 and bfloat16,
// and 512 keys in bfloat16 only.
TEST(EmulatedGmmHeadBlocks, OptInSharedMemoryFitsLongerSources) {
  gmm::GmmParams p;
  p.batch = 64, p.heads = 8, p.head_dim = 64, p.value_dim = 64, p.components = 4;
  const gpu::Launch default_launch{nullptr, 4};
  const gpu::Launch opted_in{nullptr, 4, 227 * 1024};
  for (const bool backward : {false, true}) {
    p.query_len = p.key_len = 256;
    EXPECT_FALSE(gmm::cuda::head_blocks_fit(p, at::kFloat, backward, default_launch)) << backward;
    EXPECT_FALSE(gmm::cuda::head_blocks_fit(p, at::kBFloat16, backward, default_launch)) << backward;
    EXPECT_TRUE(gmm::cuda::head_blocks_fit(p, at::kFloat, backward, opted_in)) << backward;
    EXPECT_TRUE(gmm::cuda::head_blocks_fit(p, at::kBFloat16, backward, opted_in)) << backward;
    p.query_len = p.key_len = 512;
    EXPECT_FALSE(gmm::cuda::head_blocks_fit(p, at::kFloat, backward, opted_in)) << backward;
    EXPECT_TRUE(gmm::cuda::head_blocks_fit(p, at::kBFloat16, backward, opted_in)) << backward;
  }
}

// A block past 48 KiB of shared memory (float64, D 64, 60 keys: 67 and 69 KiB with 4 warps) is refused at the
// default limit, naming the bytes, and with the limit opted in gives the one-warp-per-row kernels' results (which
// EmulatedGmm holds to the CPU operator), forward and backward, 4 warps a block as on the GPU.
TEST(EmulatedGmmHeadBlocks, PastFortyEightKibibytesMatchRowKernels) {
  const GmmCase c{"OptIn", 2, 2, 16, 60, 64, 64, 4, gmm::kStrict, true, {60, 23}};
  const DtypeCase dtype = kFloat64;
  at::manual_seed(19);
  const auto [q, k, v, grad_out, m, lengths] = random_inputs(c, dtype);
  const gmm::LocalBias local{m.center, m.width};
  const gmm::GmmParams p = gmm::check_gmm_args("emulated gmm", q, k, v, lengths, m.omega, m.mu, m.sigma, m.gate,
                                               local, kScale, c.normalization, kSigmaFloor);
  gmm::cuda::Inputs in = gmm::cuda::kernel_inputs(q, k, v, lengths, m.omega, m.mu, m.sigma, m.gate, local);
  const gpu::Launch default_launch{nullptr, 4};
  const gpu::Launch opted_in{nullptr, 4, 227 * 1024};
  ASSERT_FALSE(gmm::cuda::head_blocks_fit(p, at::kDouble, /*backward=*/false, default_launch));
  try {
    gmm::cuda::run_gmm_forward(p, in, true, default_launch, GmmKernels::kHeadBlocks);
    ADD_FAILURE() << "a block past the shared-memory limit must be refused";
  } catch (const c10::Error& error) {
    EXPECT_NE(std::string(error.what()).find("bytes of shared memory for key_len 60 (at most 49152)"),
              std::string::npos)
        << error.what();
  }
  const KernelRun row_warps{emulated_launch(), GmmKernels::kRowWarps};
  expect_runs_agree(p, in, grad_out, dtype, row_warps, {opted_in, GmmKernels::kHeadBlocks}, "opted in");
}

std::string case_name(const ::testing::TestParamInfo<std::tuple<GmmCase, DtypeCase, GmmKernels>>& info) {
  const char* kernels = std::get<2>(info.param) == GmmKernels::kHeadBlocks ? "HeadBlocks" : "RowWarps";
  return std::get<0>(info.param).name + "_" + dtype_name(std::get<1>(info.param).dtype) + "_" + kernels;
}

INSTANTIATE_TEST_SUITE_P(Cases, EmulatedGmm,
                         ::testing::Combine(::testing::ValuesIn(kCases), ::testing::ValuesIn(kAllDtypes),
                                            ::testing::Values(GmmKernels::kRowWarps, GmmKernels::kHeadBlocks)),
                         case_name);

}  // namespace
}  // namespace mma_nmt::emulated
