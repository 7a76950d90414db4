// The Gaussian-mixture arithmetic that the GMM CPU and CUDA kernels share (csrc/gmm/gmm_math.h), against the SPEC
// formulas written out here independently, and its gradients against central finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "gmm/gmm_math.h"

namespace mma_nmt::gmm {
namespace {

constexpr double kPi = 3.14159265358979323846;

// omega * N(j; mu, sigma) (density modes) or omega * exp(-(j - mu)^2 / (2 sigma^2)) (unnormalised).
double spec_term(double omega, double mu, double sigma, double j, bool density) {
  const double gauss = std::exp(-(j - mu) * (j - mu) / (2 * sigma * sigma));
  return omega * (density ? gauss / (std::sqrt(2 * kPi) * sigma) : gauss);
}

// sum_j w_j u_j for one component: the loss whose gradients component_grads returns.
double weighted_mixture(double omega, double mu, double sigma, const std::vector<double>& w, bool density) {
  double total = 0;
  for (size_t j = 0; j < w.size(); ++j) total += w[j] * spec_term(omega, mu, sigma, double(j), density);
  return total;
}

TEST(GmmMath, ComponentTermIsTheSpecDensity) {
  for (int64_t mode : {int64_t(kApproximate), int64_t(kStrict), int64_t(kUnnormalised)}) {
    for (double sigma : {0.3, 1.0, 2.5, 7.0}) {
      for (double mu : {-1.5, 0.0, 3.25, 11.0}) {
        const Component<double> c = make_component(0.7, mu, sigma, 1e-2, mode);
        for (double j : {0.0, 1.0, 4.0, 9.0}) {
          const double expected = spec_term(1.0, mu, sigma, j, mode != kUnnormalised);
          EXPECT_NEAR(c.omega * component_term(c, j), 0.7 * expected, 1e-15 + 1e-13 * expected)
              << "mode " << mode << " sigma " << sigma << " mu " << mu << " j " << j;
        }
      }
    }
  }
}

TEST(GmmMath, FromLogMatchesDirectConstruction) {
  const double sigma = 1.7, floor = 1e-2;
  const Component<double> direct = make_component(0.4, 2.0, sigma, floor, kApproximate);
  const Component<double> from_log = make_component_from_log(0.4, 2.0, sigma, floor, kApproximate, std::log(sigma));
  EXPECT_DOUBLE_EQ(direct.log_coeff, from_log.log_coeff);
  EXPECT_DOUBLE_EQ(direct.inv_2var, from_log.inv_2var);
}

TEST(GmmMath, SigmaBelowFloorIsFlooredAndCutFromTheGradient) {
  const Component<double> low = make_component(1.0, 0.0, 1e-4, 1e-2, kApproximate);
  EXPECT_DOUBLE_EQ(low.sigma, 1e-2);
  EXPECT_FALSE(low.sigma_live);
  EXPECT_DOUBLE_EQ(component_grads(low, 1.0, 2.0, 3.0).sigma, 0.0);
  const Component<double> at_floor = make_component(1.0, 0.0, 1e-2, 1e-2, kApproximate);
  EXPECT_TRUE(at_floor.sigma_live);  // clamp_min passes the gradient at the bound
}

TEST(GmmMath, NanSigmaStaysNan) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_TRUE(std::isnan(floored(nan, 1e-2)));
  const Component<double> c = make_component(1.0, 0.0, nan, 1e-2, kApproximate);
  EXPECT_TRUE(std::isnan(component_term(c, 0.0)));
  const LocalBiasRow<double> r = make_local_bias(0.0, nan, 1e-2);
  EXPECT_TRUE(std::isnan(local_bias(r, 1.0)));
}

TEST(GmmMath, StrictShiftIsTheLargestLogTermOverRealKeys) {
  std::mt19937 gen(5);
  std::uniform_real_distribution<double> mean(-4.0, 20.0), width(0.05, 3.0), weight(0.0, 1.0);
  for (int trial = 0; trial < 50; ++trial) {
    const int64_t n_keys = 1 + trial % 13;
    std::vector<Component<double>> comps;
    for (int k = 0; k < 3; ++k) {
      comps.push_back(make_component(k == 1 && trial % 4 == 0 ? 0.0 : weight(gen), mean(gen), width(gen), 1e-2,
                                     int64_t(kStrict)));
    }
    double brute = -INFINITY;
    for (const auto& c : comps) {
      if (!(c.omega > 0)) continue;
      for (int64_t j = 0; j < n_keys; ++j) {
        brute = std::max(brute, std::log(c.omega) + std::log(component_term(c, double(j))));
      }
    }
    const double shift = strict_shift(comps.data(), 3, n_keys);
    EXPECT_NEAR(shift, brute, 1e-9 * (1 + std::abs(brute))) << "trial " << trial;
    // After the shift the largest weighted term is exp(0) = 1: the row sum cannot underflow.
    apply_shift(comps.data(), 3, shift);
    double largest = 0;
    for (const auto& c : comps) {
      for (int64_t j = 0; j < n_keys; ++j) largest = std::max(largest, c.omega * component_term(c, double(j)));
    }
    EXPECT_NEAR(largest, 1.0, 1e-9) << "trial " << trial;
  }
}

TEST(GmmMath, StrictShiftIsZeroWithoutPositiveWeight) {
  Component<double> comps[2] = {make_component(0.0, 1.0, 1.0, 1e-2, int64_t(kStrict)),
                                make_component(-0.5, 2.0, 1.0, 1e-2, int64_t(kStrict))};
  EXPECT_DOUBLE_EQ(strict_shift(comps, 2, 5), 0.0);
}

TEST(GmmMath, ComponentGradsMatchFiniteDifferences) {
  std::mt19937 gen(11);
  std::normal_distribution<double> normal(0.0, 1.0);
  const double h = 1e-6;
  for (bool density : {true, false}) {
    const int64_t mode = density ? int64_t(kApproximate) : int64_t(kUnnormalised);
    for (int trial = 0; trial < 10; ++trial) {
      const int n_keys = 1 + 3 * trial;
      std::vector<double> w(n_keys);
      for (double& x : w) x = normal(gen);
      const double omega = 0.2 + std::abs(normal(gen)), mu = 0.5 * n_keys + normal(gen);
      const double sigma = 0.4 + std::abs(normal(gen));
      const Component<double> c = make_component(omega, mu, sigma, 1e-2, mode);
      double m0 = 0, m1 = 0, m2 = 0;
      for (int j = 0; j < n_keys; ++j) {
        const double e = component_term(c, double(j)), d = j - mu;
        m0 += w[j] * e, m1 += w[j] * e * d, m2 += w[j] * e * d * d;
      }
      const ComponentGrads<double> g = component_grads(c, m0, m1, m2);
      const auto loss = [&](double o, double m, double s) { return weighted_mixture(o, m, s, w, density); };
      const double d_omega = (loss(omega + h, mu, sigma) - loss(omega - h, mu, sigma)) / (2 * h);
      const double d_mu = (loss(omega, mu + h, sigma) - loss(omega, mu - h, sigma)) / (2 * h);
      const double d_sigma = (loss(omega, mu, sigma + h) - loss(omega, mu, sigma - h)) / (2 * h);
      EXPECT_NEAR(g.omega, d_omega, 1e-7 * (1 + std::abs(d_omega))) << "trial " << trial;
      EXPECT_NEAR(g.mu, d_mu, 1e-7 * (1 + std::abs(d_mu))) << "trial " << trial;
      EXPECT_NEAR(g.sigma, d_sigma, 1e-7 * (1 + std::abs(d_sigma))) << "trial " << trial;
    }
  }
}

TEST(GmmMath, LocalBiasAndItsGradsMatchTheFormula) {
  std::mt19937 gen(13);
  std::normal_distribution<double> normal(0.0, 1.0);
  const double h = 1e-6;
  for (int trial = 0; trial < 10; ++trial) {
    const int n_keys = 2 + trial;
    std::vector<double> s(n_keys);
    for (double& x : s) x = normal(gen);
    const double center = n_keys * 0.5 + normal(gen), width = 0.5 + std::abs(normal(gen));
    const auto loss = [&](double c, double wd) {
      double total = 0;
      for (int j = 0; j < n_keys; ++j) total += s[j] * (-(j - c) * (j - c) / (2 * wd * wd));
      return total;
    };
    const LocalBiasRow<double> r = make_local_bias(center, width, 1e-2);
    double n1 = 0, n2 = 0;
    for (int j = 0; j < n_keys; ++j) {
      EXPECT_NEAR(local_bias(r, double(j)), -(j - center) * (j - center) / (2 * width * width), 1e-12);
      n1 += s[j] * (j - center), n2 += s[j] * (j - center) * (j - center);
    }
    const double d_center = (loss(center + h, width) - loss(center - h, width)) / (2 * h);
    const double d_width = (loss(center, width + h) - loss(center, width - h)) / (2 * h);
    EXPECT_NEAR(local_center_grad(r, n1), d_center, 1e-6 * (1 + std::abs(d_center)));
    EXPECT_NEAR(local_width_grad(r, n2), d_width, 1e-6 * (1 + std::abs(d_width)));
  }
  EXPECT_DOUBLE_EQ(local_width_grad(make_local_bias(0.0, 1e-3, 1e-2), 5.0), 0.0);  // floored width: no gradient
}

}  // namespace
}  // namespace mma_nmt::gmm
