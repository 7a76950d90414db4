// The GMM composition's mixture kernels (gmm/cuda/mixture_kernels.cuh) under the HIP CPU emulator: each pass against
// the CPU passes (gmm/cpu/mixture_passes_cpu.cpp) on the same rows, every normalisation, padding with a length-1 and an
// empty sentence, more keys than lanes, T = 1, K = 1 and 4, sigmas below the floor and means outside the sentence;
// then the whole composition with the kernels against the CPU operator, and its ATen work counted around them; and in
// half precision, with the attention's CUDA kernels as its dot-product half, the mixture in float32 (CUDA autocast's
// call) or in q's dtype.
#include "emulated_testing.h"  // first: torch's headers before HIP's

#include <ATen/core/dispatch/Dispatcher.h>

#include <optional>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "../dispatch_budget.h"
#include "attention/cuda/attention_backward_kernel.cuh"
#include "attention/cuda/attention_forward_kernel.cuh"
#include "attention/operator_kernels.h"
#include "common/key_padding.h"
#include "gmm/cuda/mixture_kernels.cuh"
#include "gmm/gmm_composition.h"

namespace mma_nmt::emulated {
namespace {

struct MixtureCase {
  std::string name;
  int64_t batch, heads, query_len, key_len, components;
  std::vector<int64_t> key_lengths;  // empty: no padding
};

void PrintTo(const MixtureCase& c, std::ostream* os) { *os << c.name; }

const MixtureCase kCases[] = {
    {"LengthOneAndEmptySentence", 3, 2, 4, 6, 4, {6, 1, 0}},
    {"MoreKeysThanLanes", 2, 2, 5, 70, 4, {70, 33}},
    {"DecoderStepOneComponent", 2, 3, 1, 41, 1, {41, 9}},
    {"NoPadding", 1, 2, 3, 37, 2, {}},
};

constexpr double kSigmaFloor = 0.05;

struct PassInputs {
  gmm::GmmParams p;
  gmm::MixtureInputs mixture;
  at::Tensor gate, x;
};

// A softmax's weights, means in [-3, S + 3] (some outside the sentence, where strict mode's shift matters), widths on
// both sides of the floor, gates in (0, 1) and x = dO . v as random values, NaN past each sentence's keys (never read).
PassInputs pass_inputs(const MixtureCase& c, int64_t normalization, at::ScalarType dtype) {
  const auto options = at::TensorOptions().dtype(dtype);
  const std::vector<int64_t> components{c.batch, c.heads, c.query_len, c.components};
  PassInputs in;
  in.p.batch = c.batch;
  in.p.heads = c.heads;
  in.p.query_len = c.query_len;
  in.p.key_len = c.key_len;
  in.p.components = c.components;
  in.p.normalization = normalization;
  in.p.sigma_floor = kSigmaFloor;
  in.p.has_key_lengths = !c.key_lengths.empty();
  const at::Tensor omega = at::softmax(at::randn(components, options), -1);
  const at::Tensor mu = at::sigmoid(at::randn(components, options)) * (c.key_len + 6.0) - 3.0;
  const at::Tensor sigma = at::sigmoid(at::randn(components, options)) * (c.key_len / 6.0) + 0.02;
  sigma.view({-1}).slice(0, 0, std::nullopt, 3).fill_(kSigmaFloor / 2);
  std::optional<at::Tensor> lengths;
  if (!c.key_lengths.empty()) lengths = at::tensor(c.key_lengths);
  in.mixture = gmm::mixture_inputs(omega, mu, sigma, lengths, dtype);
  in.gate = at::sigmoid(at::randn({c.batch, c.heads, c.query_len}, options));
  in.x = at::randn({c.batch, c.heads, c.query_len, c.key_len}, options);
  if (lengths.has_value()) in.x.masked_fill_(keys_past_sentence(*lengths, c.key_len), NAN);
  return in;
}

class EmulatedGmmMixturePasses
    : public ::testing::TestWithParam<std::tuple<MixtureCase, int64_t, DtypeCase>> {};

TEST_P(EmulatedGmmMixturePasses, KernelsMatchTheCpuPasses) {
  const auto& [c, normalization, dtype] = GetParam();
  at::manual_seed(5);
  const PassInputs in = pass_inputs(c, normalization, dtype.dtype);
  const gmm::MixturePasses cpu = gmm::cpu_mixture_passes();
  const gmm::MixturePasses kernels = gmm::cuda::kernel_mixture_passes(emulated_launch());

  const gmm::MixtureForward want = cpu.forward(in.p, in.mixture);
  const gmm::MixtureForward got = kernels.forward(in.p, in.mixture);
  expect_close(got.beta, want.beta, dtype, "gmm_mixture_forward", "beta");
  expect_close(got.log_mass, want.log_mass, dtype, "gmm_mixture_forward", "log_mass");

  const gmm::MixtureBackward want_b = cpu.backward(in.p, in.mixture, in.gate, in.x);
  const gmm::MixtureBackward got_b = kernels.backward(in.p, in.mixture, in.gate, in.x);
  expect_close(got_b.beta, want.beta, dtype, "gmm_mixture_backward", "beta");
  expect_close(got_b.delta_b, want_b.delta_b, dtype, "gmm_mixture_backward", "delta_b");
  expect_close(got_b.grad_omega, want_b.grad_omega, dtype, "gmm_mixture_backward", "grad_omega");
  expect_close(got_b.grad_mu, want_b.grad_mu, dtype, "gmm_mixture_backward", "grad_mu");
  expect_close(got_b.grad_sigma, want_b.grad_sigma, dtype, "gmm_mixture_backward", "grad_sigma");

  // Not vacuous: the CPU passes' results are finite (x's NaN behind the padding unread) and not all zero; and the
  // padding's beta is 0, an empty sentence's log mass -inf.
  for (const at::Tensor& t : {want.beta, want_b.delta_b, want_b.grad_mu, want_b.grad_sigma}) {
    EXPECT_TRUE(t.isfinite().all().item<bool>());
    EXPECT_TRUE(t.abs().gt(1e-6).any().item<bool>());
  }
  for (size_t b = 0; b < c.key_lengths.size(); ++b) {
    EXPECT_TRUE(want.beta[b].narrow(-1, c.key_lengths[b], c.key_len - c.key_lengths[b]).eq(0).all().item<bool>());
    if (c.key_lengths[b] == 0) {
      EXPECT_TRUE(want.log_mass[b].isneginf().all().item<bool>());
    }
  }
}

std::string normalization_name(int64_t normalization) {
  return normalization == gmm::kApproximate ? "Approximate" : normalization == gmm::kStrict ? "Strict" : "Unnormalised";
}

INSTANTIATE_TEST_SUITE_P(
    Cases, EmulatedGmmMixturePasses,
    ::testing::Combine(::testing::ValuesIn(kCases),
                       ::testing::Values(gmm::kApproximate, gmm::kStrict, gmm::kUnnormalised),
                       ::testing::Values(kFloat64, kFloat32)),
    [](const ::testing::TestParamInfo<std::tuple<MixtureCase, int64_t, DtypeCase>>& info) {
      return std::get<0>(info.param).name + "_" + normalization_name(std::get<1>(info.param)) + "_" +
             dtype_name(std::get<2>(info.param).dtype);
    });

using OptionalTensor = std::optional<at::Tensor>;
using ForwardFn = gmm::GmmForwardResult(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                        const OptionalTensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                        const at::Tensor&, const OptionalTensor&, const OptionalTensor&, double,
                                        int64_t, double, bool);
using BackwardFn = gmm::GmmBackwardResult(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                          const OptionalTensor&, const at::Tensor&, const at::Tensor&,
                                          const at::Tensor&, const at::Tensor&, const OptionalTensor&,
                                          const OptionalTensor&, const at::Tensor&, const at::Tensor&,
                                          const at::Tensor&, const at::Tensor&, double, int64_t, double);

constexpr double kScale = 0.3;

// The gradients the composition computes (all but the localness bias's), in GmmBackwardResult's order.
const char* const kGradNames[] = {"grad_q", "grad_k", "grad_v", "grad_omega", "grad_mu", "grad_sigma", "grad_gate"};

std::vector<at::Tensor> composable_grads(const gmm::GmmBackwardResult& g) {
  return {std::get<0>(g), std::get<1>(g), std::get<2>(g), std::get<3>(g), std::get<4>(g), std::get<5>(g),
          std::get<6>(g)};
}

// The operator's inputs for a case: q, k, v (D 8) and dO beside the mixture of pass_inputs.
struct OperatorInputs {
  at::Tensor q, k, v, grad_out, omega, mu, sigma, gate;
  OptionalTensor lengths;
};

OperatorInputs operator_inputs(const MixtureCase& c, int64_t normalization) {
  const PassInputs mix = pass_inputs(c, normalization, at::kDouble);
  OperatorInputs in;
  in.q = at::randn({c.batch, c.heads, c.query_len, 8}, at::kDouble);
  in.k = at::randn({c.batch, c.heads, c.key_len, 8}, at::kDouble);
  in.v = at::randn({c.batch, c.heads, c.key_len, 8}, at::kDouble);
  in.grad_out = at::randn({c.batch, c.heads, c.query_len, 8}, at::kDouble);
  in.omega = mix.mixture.omega;
  in.mu = mix.mixture.mu;
  in.sigma = mix.mixture.sigma;
  in.gate = mix.gate;
  if (!c.key_lengths.empty()) in.lengths = at::tensor(c.key_lengths);
  return in;
}

class EmulatedGmmCompositionWithMixtureKernels
    : public ::testing::TestWithParam<std::tuple<MixtureCase, int64_t>> {};

TEST_P(EmulatedGmmCompositionWithMixtureKernels, MatchesCpuOperator) {
  const auto& [c, normalization] = GetParam();
  at::manual_seed(9);
  const OperatorInputs in = operator_inputs(c, normalization);
  const auto forward = c10::Dispatcher::singleton().findSchemaOrThrow("mma_nmt::gmm_attention", "").typed<ForwardFn>();
  const auto backward =
      c10::Dispatcher::singleton().findSchemaOrThrow("mma_nmt::gmm_attention_backward", "").typed<BackwardFn>();
  const gmm::GmmForwardResult cpu = forward.call(in.q, in.k, in.v, in.lengths, in.omega, in.mu, in.sigma, in.gate,
                                                 std::nullopt, std::nullopt, kScale, normalization, kSigmaFloor, false);
  const auto& [out, lse, log_mass, ctx_a, ctx_b, alpha, beta] = cpu;
  const gmm::GmmBackwardResult cpu_grads =
      backward.call(in.grad_out, in.q, in.k, in.v, in.lengths, in.omega, in.mu, in.sigma, in.gate, std::nullopt,
                    std::nullopt, lse, log_mass, ctx_a, ctx_b, kScale, normalization, kSigmaFloor);

  const gmm::GmmParams p = gmm::check_gmm_args("emulated gmm", in.q, in.k, in.v, in.lengths, in.omega, in.mu,
                                               in.sigma, in.gate, {}, kScale, normalization, kSigmaFloor);
  const gmm::CompositionKernels kernels{attention::dispatched_attention_kernels(),
                                        gmm::cuda::kernel_mixture_passes(emulated_launch())};
  testing::DispatchCount forward_ops, backward_ops;
  std::optional<gmm::GmmForwardResult> got;
  std::optional<gmm::GmmBackwardResult> got_grads;
  {
    testing::DispatchCounter counter(forward_ops, 1 << 30);
    got = gmm::gmm_forward_by_composition(p, in.q, in.k, in.v, in.lengths, in.omega, in.mu, in.sigma, in.gate, false,
                                          kernels);
  }
  {
    testing::DispatchCounter counter(backward_ops, 1 << 30);
    got_grads = gmm::gmm_backward_by_composition(p, in.grad_out, in.q, in.k, in.v, in.lengths, in.omega, in.mu,
                                                 in.sigma, in.gate, lse, ctx_a, ctx_b, kernels);
  }
  ASSERT_TRUE(got.has_value() && got_grads.has_value());
  const char* const forward_names[] = {"out", "lse", "log_mass", "alpha_context", "beta_context"};
  const std::vector<at::Tensor> want{out, lse, log_mass, ctx_a, ctx_b};
  const std::vector<at::Tensor> have{std::get<0>(*got), std::get<1>(*got), std::get<2>(*got), std::get<3>(*got),
                                     std::get<4>(*got)};
  const DtypeCase exact{at::kDouble, at::kDouble, 1e-10};
  for (size_t i = 0; i < want.size(); ++i) expect_close(have[i], want[i], exact, "gmm_composition", forward_names[i]);
  const std::vector<at::Tensor> want_grads = composable_grads(cpu_grads), have_grads = composable_grads(*got_grads);
  for (size_t i = 0; i < want_grads.size(); ++i) {
    expect_close(have_grads[i], want_grads[i], exact, "gmm_composition", kGradNames[i]);
  }
  // Each pass is one kernel (one mma_nmt:: op), where the mixture took an ATen op per component and step.
  EXPECT_EQ(forward_ops.by_name["mma_nmt::gmm_mixture_forward"], 1);
  EXPECT_EQ(backward_ops.by_name["mma_nmt::gmm_mixture_backward"], 1);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, EmulatedGmmCompositionWithMixtureKernels,
    ::testing::Combine(::testing::ValuesIn(kCases),
                       ::testing::Values(gmm::kApproximate, gmm::kStrict, gmm::kUnnormalised)),
    [](const ::testing::TestParamInfo<std::tuple<MixtureCase, int64_t>>& info) {
      return std::get<0>(info.param).name + "_" + normalization_name(std::get<1>(info.param));
    });

// The composition in float16/bfloat16 as the GPU runs it: the dot-product half by the attention operator's CUDA
// kernels, the mixture by the mixture kernels, all under the emulator (the CPU attention kernel takes no half
// precision), against the CPU operator on the same rounded values in float32. The mixture in float32 beside q (CUDA
// autocast's call: its gradients come back in float32) or in q's dtype.
attention::AttentionKernels emulated_attention_kernels() {
  return {[](const attention::AttentionParams& p, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
             const OptionalTensor& lengths) {
            return attention::cuda::run_attention_forward(p, q, k, v, lengths, false, emulated_launch());
          },
          [](const attention::AttentionParams& p, const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k,
             const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse, const OptionalTensor& lengths) {
            return attention::cuda::run_attention_backward(p, grad_out, q, k, v, out, lse, lengths, emulated_launch());
          }};
}

class EmulatedGmmCompositionHalfPrecision
    : public ::testing::TestWithParam<std::tuple<DtypeCase, int64_t, bool>> {};

TEST_P(EmulatedGmmCompositionHalfPrecision, MatchesCpuOperatorInFloat32) {
  const auto& [dtype, normalization, wide_mixture] = GetParam();
  const MixtureCase c{"HalfPrecision", 2, 2, 5, 40, 3, {40, 1}};
  at::manual_seed(13);
  const OperatorInputs exact = operator_inputs(c, normalization);
  const auto narrow = [&](const at::Tensor& t) { return t.to(dtype.dtype); };
  const auto mixture = [&](const at::Tensor& t) { return wide_mixture ? t.to(at::kFloat) : narrow(t); };
  const at::Tensor q = narrow(exact.q), k = narrow(exact.k), v = narrow(exact.v), grad_out = narrow(exact.grad_out);
  const at::Tensor omega = mixture(exact.omega), mu = mixture(exact.mu), sigma = mixture(exact.sigma),
                   gate = mixture(exact.gate);
  const gmm::GmmParams p = gmm::check_gmm_args("emulated gmm", q, k, v, exact.lengths, omega, mu, sigma, gate, {},
                                               kScale, normalization, kSigmaFloor);
  ASSERT_EQ(p.wide_mixture, wide_mixture);
  ASSERT_TRUE(gmm::composable(p, false));
  const gmm::CompositionKernels kernels{emulated_attention_kernels(),
                                        gmm::cuda::kernel_mixture_passes(emulated_launch())};
  const auto got = gmm::gmm_forward_by_composition(p, q, k, v, exact.lengths, omega, mu, sigma, gate, false, kernels);
  ASSERT_TRUE(got.has_value());
  const auto& [out, lse, log_mass, ctx_a, ctx_b, alpha, beta] = *got;
  const auto got_grads = gmm::gmm_backward_by_composition(p, grad_out, q, k, v, exact.lengths, omega, mu, sigma, gate,
                                                          lse, ctx_a, ctx_b, kernels);
  ASSERT_TRUE(got_grads.has_value());

  // The CPU operator in float32 on the same values, its backward from its own forward's statistics.
  const auto wide = [](const at::Tensor& t) { return t.to(at::kFloat); };
  const auto forward = c10::Dispatcher::singleton().findSchemaOrThrow("mma_nmt::gmm_attention", "").typed<ForwardFn>();
  const auto backward =
      c10::Dispatcher::singleton().findSchemaOrThrow("mma_nmt::gmm_attention_backward", "").typed<BackwardFn>();
  const gmm::GmmForwardResult cpu =
      forward.call(wide(q), wide(k), wide(v), exact.lengths, wide(omega), wide(mu), wide(sigma), wide(gate),
                   std::nullopt, std::nullopt, kScale, normalization, kSigmaFloor, false);
  const auto& [cpu_out, cpu_lse, cpu_log_mass, cpu_ctx_a, cpu_ctx_b, cpu_alpha, cpu_beta] = cpu;
  const gmm::GmmBackwardResult cpu_grads =
      backward.call(wide(grad_out), wide(q), wide(k), wide(v), exact.lengths, wide(omega), wide(mu), wide(sigma),
                    wide(gate), std::nullopt, std::nullopt, cpu_lse, cpu_log_mass, cpu_ctx_a, cpu_ctx_b, kScale,
                    normalization, kSigmaFloor);

  const std::string label = std::string("gmm_composition ") + (wide_mixture ? "wide" : "narrow") + " mixture";
  EXPECT_EQ(out.scalar_type(), dtype.dtype);
  expect_close(out, cpu_out, dtype, label, "out");
  expect_close(lse, cpu_lse, dtype, label, "lse");
  expect_close(log_mass, cpu_log_mass, dtype, label, "log_mass");
  expect_close(ctx_b, cpu_ctx_b, dtype, label, "beta_context");
  const std::vector<at::Tensor> want = composable_grads(cpu_grads), have = composable_grads(*got_grads);
  for (size_t i = 0; i < want.size(); ++i) {
    // q, k and v's gradients in their dtype, the mixture's in its own (float32 when wide)
    EXPECT_EQ(have[i].scalar_type(), i < 3 ? dtype.dtype : omega.scalar_type()) << kGradNames[i];
    expect_close(have[i], want[i], dtype, label, kGradNames[i]);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, EmulatedGmmCompositionHalfPrecision,
    ::testing::Combine(::testing::Values(kFloat16, kBFloat16), ::testing::Values(gmm::kApproximate, gmm::kStrict),
                       ::testing::Bool()),
    [](const ::testing::TestParamInfo<std::tuple<DtypeCase, int64_t, bool>>& info) {
      return dtype_name(std::get<0>(info.param).dtype) + "_" + normalization_name(std::get<1>(info.param)) +
             (std::get<2>(info.param) ? "_WideMixture" : "_NarrowMixture");
    });

}  // namespace
}  // namespace mma_nmt::emulated
