#include "gmm/gmm_params.h"

#include <ATen/ATen.h>

#include <cmath>
#include <vector>

#include "common/checks.h"
#include "gmm/gmm_math.h"

namespace mma_nmt::gmm {
namespace {

// Whether the mixture comes in float32 beside half-precision q (GmmParams::wide_mixture); any other dtype of omega
// than those two is refused, naming both.
bool wide_mixture(const char* op, const at::Tensor& omega, const at::Tensor& q) {
  const at::ScalarType mixture = omega.scalar_type(), dtype = q.scalar_type();
  const bool wide = is_half_precision(dtype) && mixture == at::kFloat;
  TORCH_CHECK_TYPE(mixture == dtype || wide, op, ": omega must have dtype ", dtype, " like q",
                   is_half_precision(dtype) ? " or Float (the mixture may stay in float32 beside half-precision q)" : "",
                   ", got ", mixture);
  return wide;
}

// Checks omega, mu and sigma, (B, H, T, K) on q's device, mu and sigma in omega's dtype; returns
// GmmParams::wide_mixture.
bool check_mixture(const char* op, const GmmParams& p, const at::Tensor& omega, const at::Tensor& mu,
                   const at::Tensor& sigma, const at::Tensor& q) {
  check_rank(op, "omega", omega, 4, "(batch, heads, query_len, components)");
  const int64_t K = omega.size(3);
  TORCH_CHECK_VALUE(K >= 1, op, ": omega must have at least one component (last dimension), got shape ", omega.sizes());
  const std::vector<int64_t> shape{p.batch, p.heads, p.query_len, K};
  TORCH_CHECK_VALUE(omega.sizes() == shape, op, ": omega must have shape ", shape, ", got ", omega.sizes());
  TORCH_CHECK_VALUE(omega.device() == q.device(), op, ": omega is on ", omega.device(), " but q is on ", q.device());
  const bool wide = wide_mixture(op, omega, q);
  check_same_layout(op, "mu", mu, shape, omega, "omega");
  check_same_layout(op, "sigma", sigma, shape, omega, "omega");
  return wide;
}

}  // namespace

GmmParams check_gmm_args(const char* op, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         const std::optional<at::Tensor>& key_lengths, const at::Tensor& omega, const at::Tensor& mu,
                         const at::Tensor& sigma, const at::Tensor& gate, const LocalBias& local, double scale,
                         int64_t normalization, double sigma_floor) {
  GmmParams p;
  static_cast<AttentionSizes&>(p) = check_query_key_value(op, q, k, v, ValueLayout::kPerHead);
  p.wide_mixture = check_mixture(op, p, omega, mu, sigma, q);
  p.components = omega.size(3);
  check_same_layout(op, "gate", gate, {p.batch, p.heads, p.query_len}, omega, "omega");
  TORCH_CHECK_VALUE(local.center.has_value() == local.width.has_value(), op,
                    ": local_center and local_width must be given together (localness-Gaussian bias) or both None");
  if (local.center.has_value()) {
    check_same_layout(op, "local_center", *local.center, {p.batch, p.heads, p.query_len}, omega, "omega");
    check_same_layout(op, "local_width", *local.width, {p.batch, p.heads, p.query_len}, omega, "omega");
  }
  TORCH_CHECK_VALUE(scale > 0.0 && std::isfinite(scale), op, ": scale must be positive and finite, got ", scale);
  TORCH_CHECK_VALUE(normalization >= 0 && normalization < kNumNormalizations, op,
                    ": normalization must be 0 (approximate), 1 (strict) or 2 (unnormalised), got ", normalization);
  TORCH_CHECK_VALUE(sigma_floor > 0.0 && std::isfinite(sigma_floor), op,
                    ": sigma_floor must be positive and finite, got ", sigma_floor);
  if (key_lengths.has_value()) check_key_lengths(op, *key_lengths, q, p.key_len);
  p.scale = scale;
  p.normalization = normalization;
  p.sigma_floor = sigma_floor;
  p.has_key_lengths = key_lengths.has_value();
  p.has_local_bias = local.center.has_value();
  return p;
}

void check_gmm_backward_extras(const char* op, const GmmParams& p, const at::Tensor& q, const at::Tensor& grad_out,
                               const at::Tensor& lse, const at::Tensor& log_mass, const at::Tensor& alpha_context,
                               const at::Tensor& beta_context) {
  check_same_layout(op, "grad_out", grad_out, {p.batch, p.heads, p.query_len, p.value_dim}, q);
  const at::Tensor like = at::empty({0}, q.options().dtype(stats_dtype(q.scalar_type())));
  check_same_layout(op, "lse", lse, {p.batch, p.heads, p.query_len}, like);
  check_same_layout(op, "log_mass", log_mass, {p.batch, p.heads, p.query_len}, like);
  check_same_layout(op, "alpha_context", alpha_context, {p.batch, p.heads, p.query_len, p.value_dim}, like);
  check_same_layout(op, "beta_context", beta_context, {p.batch, p.heads, p.query_len, p.value_dim}, like);
}

}  // namespace mma_nmt::gmm
