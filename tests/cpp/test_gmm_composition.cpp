// mma_nmt::gmm_attention by composition (gmm_composition.h), the CUDA backend's choice past its block kernels' size,
// run on CPU tensors (the attention half by mma_nmt::attention's CPU kernel, the mixture half by the CPU passes, which
// run mixture_rows.h as the CUDA mixture kernels do: tests/cpp/emulated/test_emulated_gmm_mixture.cpp) against the CPU
// kernel through the dispatcher: every output and gradient, the three normalisations, padding with length-1 and empty
// sentences, one decoder step and T != S, K = 1 and K = 4, sigma below the floor, means outside the sentence (strict
// mode's shift), gates near 0 and 1; and the calls it refuses.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <optional>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "gmm/gmm_composition.h"
#include "gmm/gmm_math.h"
#include "padding_nan.h"

namespace {

using mma_nmt::gmm::GmmBackwardResult;
using mma_nmt::gmm::GmmForwardResult;
using OptionalTensor = std::optional<at::Tensor>;
using ForwardFn = GmmForwardResult(const at::Tensor&, const at::Tensor&, const at::Tensor&, const OptionalTensor&,
                                   const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                   const OptionalTensor&, const OptionalTensor&, double, int64_t, double, bool);
using BackwardFn = GmmBackwardResult(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                     const OptionalTensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                     const at::Tensor&, const OptionalTensor&, const OptionalTensor&,
                                     const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                     double, int64_t, double);

constexpr double kScale = 0.3;
constexpr double kSigmaFloor = 0.05;

struct Case {
  std::string name;
  int64_t batch, heads, query_len, key_len, dim, components;
  std::vector<int64_t> key_lengths;  // empty: no padding
  int64_t value_dim = 0;             // 0: dim
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

const Case kCases[] = {
    {"StepWithLengthOneAndEmptySentence", 3, 2, 1, 6, 8, 4, {6, 1, 0}},
    {"AllStepsTNotSOneComponent", 2, 3, 5, 9, 8, 1, {9, 4}},
    {"NoPadding", 2, 2, 4, 4, 16, 4, {}},
    {"LongerSentencesThanOneBiasTile", 2, 2, 7, 37, 8, 4, {37, 20}},  // more keys than a CPU tile (and SDPA's 16)
    {"ValuesWiderThanQueriesAndKeys", 2, 2, 3, 5, 4, 2, {5, 2}, 7},
};

// Inputs of one call: weights from a softmax, positive widths and gates in (0, 1) as the model makes them, with edge
// values planted.
struct Inputs {
  at::Tensor q, k, v, omega, mu, sigma, gate, grad_out;
  OptionalTensor key_lengths;
};

Inputs make_inputs(const Case& c, at::ScalarType dtype) {
  at::manual_seed(31);
  const auto options = at::TensorOptions().dtype(dtype);
  const int64_t B = c.batch, H = c.heads, T = c.query_len, S = c.key_len, K = c.components;
  Inputs in;
  in.q = at::randn({B, H, T, c.dim}, options);
  in.k = at::randn({B, H, S, c.dim}, options);
  const int64_t value_dim = c.value_dim == 0 ? c.dim : c.value_dim;
  in.v = at::randn({B, H, S, value_dim}, options);
  in.grad_out = at::randn({B, H, T, value_dim}, options);
  in.omega = at::softmax(at::randn({B, H, T, K}, options), -1);
  // means in [-3, S + 3]: some outside the sentence, where strict mode's shift keeps the mass from underflowing
  in.mu = at::sigmoid(at::randn({B, H, T, K}, options)) * (S + 6.0) - 3.0;
  in.sigma = at::sigmoid(at::randn({B, H, T, K}, options)) * (S / 6.0) + 0.02;
  in.sigma.view({-1}).slice(0, 0, std::nullopt, 3).fill_(kSigmaFloor / 2);  // below the floor: no gradient
  in.gate = at::sigmoid(at::randn({B, H, T}, options) * 2.0);
  in.gate.view({-1})[0].fill_(1e-6);      // nearly all dot-product attention
  in.gate.view({-1})[1].fill_(1 - 1e-6);  // nearly all mixture
  if (!c.key_lengths.empty()) in.key_lengths = at::tensor(c.key_lengths);
  return in;
}

Inputs in_double(const Inputs& in) {
  const auto d = [](const at::Tensor& t) { return t.to(at::kDouble); };
  return {d(in.q), d(in.k), d(in.v), d(in.omega), d(in.mu), d(in.sigma), d(in.gate), d(in.grad_out), in.key_lengths};
}

// The seven outputs of gmm_attention, then the nine gradients of gmm_attention_backward.
const char* const kResultNames[] = {"out",        "lse",        "log_mass",   "alpha_context", "beta_context",
                                    "alpha",      "beta",       "grad_q",     "grad_k",        "grad_v",
                                    "grad_omega", "grad_mu",    "grad_sigma", "grad_gate",     "grad_local_center",
                                    "grad_local_width"};
constexpr size_t kGradOmega = 10;

std::vector<at::Tensor> as_list(const GmmForwardResult& forward, const GmmBackwardResult& backward) {
  std::vector<at::Tensor> all;
  std::apply([&](const auto&... t) { (all.push_back(t), ...); }, forward);
  std::apply([&](const auto&... t) { (all.push_back(t), ...); }, backward);
  return all;
}

// The CPU kernel through the dispatcher: forward, then backward from that forward's saved statistics.
std::vector<at::Tensor> cpu_kernel(const Inputs& in, int64_t normalization) {
  const auto forward = c10::Dispatcher::singleton().findSchemaOrThrow("mma_nmt::gmm_attention", "").typed<ForwardFn>();
  const auto backward =
      c10::Dispatcher::singleton().findSchemaOrThrow("mma_nmt::gmm_attention_backward", "").typed<BackwardFn>();
  const GmmForwardResult f = forward.call(in.q, in.k, in.v, in.key_lengths, in.omega, in.mu, in.sigma, in.gate,
                                          std::nullopt, std::nullopt, kScale, normalization, kSigmaFloor, false);
  const auto& [out, lse, log_mass, alpha_context, beta_context, alpha, beta] = f;
  const GmmBackwardResult b =
      backward.call(in.grad_out, in.q, in.k, in.v, in.key_lengths, in.omega, in.mu, in.sigma, in.gate, std::nullopt,
                    std::nullopt, lse, log_mass, alpha_context, beta_context, kScale, normalization, kSigmaFloor);
  return as_list(f, b);
}

// got (the composition's) agrees with the CPU kernel: same shape and dtype as `kernel`, the same infinities (lse and
// log_mass of rows without keys), every other entry within tolerance * (1 + |reference|) + 2 |kernel - reference|,
// and no NaN. `reference` is the kernel's float64 result: for float32 inputs some entries are ill-conditioned (strict
// mode, a component at the floor far outside its sentence: a gradient of exactly 0 is a difference of O(1) terms
// times (j - mu) / sigma^2 ~ 2000), where the float32 kernel itself is off by 5e-4; there the bound widens by twice
// the kernel's own error (flash-attention's accuracy rule), elsewhere it stays at the tolerance. For float64 inputs
// the reference is the kernel's result.
void expect_close(const at::Tensor& got, const at::Tensor& kernel, const at::Tensor& reference, double tolerance,
                  const std::string& what) {
  ASSERT_EQ(got.sizes(), kernel.sizes()) << what;
  ASSERT_EQ(got.scalar_type(), kernel.scalar_type()) << what;
  if (kernel.numel() == 0) return;
  const at::Tensor infinite = at::isinf(kernel) | at::isinf(reference);
  EXPECT_TRUE(at::equal(at::isinf(got), at::isinf(kernel))) << what << ": infinite entries differ";
  EXPECT_TRUE(at::equal(got.masked_select(infinite), kernel.masked_select(infinite))) << what << ": infinities differ";
  const auto finite = [&](const at::Tensor& t) { return t.to(at::kDouble).masked_fill(infinite, 0); };
  const at::Tensor a = finite(got), k = finite(kernel), r = finite(reference);
  const at::Tensor error = (a - r).abs(), bound = tolerance * (1 + r.abs()) + 2 * (k - r).abs();
  EXPECT_TRUE(error.le(bound).all().item<bool>())  // false at a NaN
      << what << ": max difference " << error.nan_to_num(1e30).max().item<double>() << " (1e30: NaN), kernel's own "
      << (k - r).abs().max().item<double>();
}

class GmmCompositionMatchesCpuKernel
    : public ::testing::TestWithParam<std::tuple<Case, int64_t, at::ScalarType>> {};

TEST_P(GmmCompositionMatchesCpuKernel, EveryOutputAndGradient) {
  const auto& [c, normalization, dtype] = GetParam();
  const Inputs in = make_inputs(c, dtype);
  const double tolerance = dtype == at::kDouble ? 1e-10 : 2e-5;
  const auto p = mma_nmt::gmm::check_gmm_args("test", in.q, in.k, in.v, in.key_lengths, in.omega, in.mu, in.sigma,
                                              in.gate, {}, kScale, normalization, kSigmaFloor);
  ASSERT_TRUE(mma_nmt::gmm::composable(p, /*return_weights=*/false));
  const std::vector<at::Tensor> kernel = cpu_kernel(in, normalization);
  const std::vector<at::Tensor> reference = dtype == at::kDouble ? kernel : cpu_kernel(in_double(in), normalization);

  const auto forward = mma_nmt::gmm::gmm_forward_by_composition(p, in.q, in.k, in.v, in.key_lengths, in.omega, in.mu,
                                                                in.sigma, in.gate, /*return_weights=*/false,
                                                                mma_nmt::gmm::cpu_composition_kernels());
  ASSERT_TRUE(forward.has_value()) << "torch has a CPU flash kernel for every dtype tested";
  // Backward from the CPU kernel's saved statistics (lse, alpha_context, beta_context): either backend's forward may
  // precede it.
  const auto backward = mma_nmt::gmm::gmm_backward_by_composition(p, in.grad_out, in.q, in.k, in.v, in.key_lengths,
                                                                  in.omega, in.mu, in.sigma, in.gate, kernel[1],
                                                                  kernel[3], kernel[4],
                                                                  mma_nmt::gmm::cpu_composition_kernels());
  ASSERT_TRUE(backward.has_value());
  const std::vector<at::Tensor> got = as_list(*forward, *backward);
  for (size_t i = 0; i < got.size(); ++i) expect_close(got[i], kernel[i], reference[i], tolerance, kResultNames[i]);

  if (in.key_lengths.has_value()) {  // NaN behind the padding changes nothing
    const at::Tensor nan_k = mma_nmt::testing::with_nan_padding(in.k, *in.key_lengths);
    const at::Tensor nan_v = mma_nmt::testing::with_nan_padding(in.v, *in.key_lengths);
    const auto nan_forward = mma_nmt::gmm::gmm_forward_by_composition(p, in.q, nan_k, nan_v, in.key_lengths, in.omega,
                                                                      in.mu, in.sigma, in.gate, false,
                                                                      mma_nmt::gmm::cpu_composition_kernels());
    const auto nan_backward = mma_nmt::gmm::gmm_backward_by_composition(
        p, in.grad_out, in.q, nan_k, nan_v, in.key_lengths, in.omega, in.mu, in.sigma, in.gate, kernel[1], kernel[3],
        kernel[4], mma_nmt::gmm::cpu_composition_kernels());
    const std::vector<at::Tensor> poisoned = as_list(*nan_forward, *nan_backward);
    for (size_t i = 0; i < got.size(); ++i) {
      mma_nmt::testing::expect_untouched_by_padding(poisoned[i], got[i], kResultNames[i]);
    }
  }

  // Every compared tensor that is not empty by contract (weights not asked for, no local bias) holds something, so
  // that no comparison above is vacuous. The exception: with one component in strict mode beta = u / sum u does not
  // depend on omega, and its gradient is 0.
  const bool lone_strict_weight = c.components == 1 && normalization == mma_nmt::gmm::kStrict;
  for (size_t i = 0; i < got.size(); ++i) {
    if (kernel[i].numel() == 0 || (i == kGradOmega && lone_strict_weight)) continue;
    EXPECT_TRUE(reference[i].isfinite().logical_and(reference[i].abs() > 1e-3).any().item<bool>())
        << kResultNames[i] << " is all zero or infinite";
  }
}

std::string normalization_name(int64_t normalization) {
  switch (normalization) {
    case mma_nmt::gmm::kApproximate:
      return "Approximate";
    case mma_nmt::gmm::kStrict:
      return "Strict";
    default:
      return "Unnormalised";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, GmmCompositionMatchesCpuKernel,
    ::testing::Combine(::testing::ValuesIn(kCases),
                       ::testing::Values(mma_nmt::gmm::kApproximate, mma_nmt::gmm::kStrict,
                                         mma_nmt::gmm::kUnnormalised),
                       ::testing::Values(at::kDouble, at::kFloat)),
    [](const ::testing::TestParamInfo<std::tuple<Case, int64_t, at::ScalarType>>& info) {
      return std::get<0>(info.param).name + "_" + normalization_name(std::get<1>(info.param)) + "_" +
             c10::toString(std::get<2>(info.param));
    });

TEST(GmmComposition, LeavesLocalBiasWeightsAndEmptyCallsToTheKernel) {
  const Case c{"Refusals", 2, 2, 3, 5, 4, 2, {5, 2}};
  const Inputs in = make_inputs(c, at::kFloat);
  const auto params = [&](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                          const mma_nmt::gmm::LocalBias& local) {
    return mma_nmt::gmm::check_gmm_args("test", q, k, v, in.key_lengths, in.omega, in.mu, in.sigma, in.gate, local,
                                        kScale, mma_nmt::gmm::kApproximate, kSigmaFloor);
  };
  const auto forward = [&](const mma_nmt::gmm::GmmParams& p, const at::Tensor& k, const at::Tensor& v,
                           bool return_weights) {
    return mma_nmt::gmm::gmm_forward_by_composition(p, in.q, k, v, in.key_lengths, in.omega, in.mu, in.sigma, in.gate,
                                                    return_weights, mma_nmt::gmm::cpu_composition_kernels());
  };
  const auto backward = [&](const mma_nmt::gmm::GmmParams& p) {
    const at::Tensor stats = at::zeros({c.batch, c.heads, c.query_len}), context = at::zeros_like(in.grad_out);
    return mma_nmt::gmm::gmm_backward_by_composition(p, in.grad_out, in.q, in.k, in.v, in.key_lengths, in.omega,
                                                     in.mu, in.sigma, in.gate, stats, context, context,
                                                     mma_nmt::gmm::cpu_composition_kernels());
  };

  const auto plain = params(in.q, in.k, in.v, {});
  EXPECT_TRUE(mma_nmt::gmm::composable(plain, false));
  EXPECT_TRUE(forward(plain, in.k, in.v, false).has_value());
  EXPECT_TRUE(backward(plain).has_value());

  // localness bias: mma_nmt::attention takes no logit bias
  const at::Tensor center = at::rand({c.batch, c.heads, c.query_len}) * c.key_len, width = at::ones_like(center);
  const auto local = params(in.q, in.k, in.v, {center, width});
  EXPECT_FALSE(mma_nmt::gmm::composable(local, false));
  EXPECT_FALSE(forward(local, in.k, in.v, false).has_value());
  EXPECT_FALSE(backward(local).has_value());

  // weights asked for: the attention half is asked for none
  EXPECT_FALSE(mma_nmt::gmm::composable(plain, true));
  EXPECT_FALSE(forward(plain, in.k, in.v, true).has_value());

  // no keys at all: the kernels' early return
  const at::Tensor no_keys = at::randn({c.batch, c.heads, 0, c.dim});
  const auto empty = mma_nmt::gmm::check_gmm_args("test", in.q, no_keys, no_keys, std::nullopt, in.omega, in.mu,
                                                  in.sigma, in.gate, {}, kScale, mma_nmt::gmm::kApproximate,
                                                  kSigmaFloor);
  EXPECT_FALSE(mma_nmt::gmm::composable(empty, false));
}

}  // namespace
