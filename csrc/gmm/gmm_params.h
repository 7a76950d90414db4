// Sizes and options of one GMM cross-attention call, validated once (gmm_checks.cpp) and handed to a backend kernel.
#pragma once

#include <cstdint>
#include <optional>

#include <ATen/core/Tensor.h>

#include "common/checks.h"
#include "common/tensors.h"

namespace mma_nmt::gmm {

struct GmmParams : AttentionSizes {
  int64_t components = 0;  // K
  double scale = 1.0;
  int64_t normalization = 0;  // gmm::Normalization
  double sigma_floor = 0.0;
  bool has_key_lengths = false;
  bool has_local_bias = false;  // localness-Gaussian logit bias given
  // The mixture (omega, mu, sigma, gate, local center and width) in float32 beside float16/bfloat16 q, k and v, as
  // CUDA autocast leaves it; else it has q's dtype. Only the CUDA kernels take such a call (mixture_values.cuh).
  bool wide_mixture = false;
};

// Optional inputs of the localness-Gaussian variant: per-query center and width of the logit bias, both (B, H, T).
struct LocalBias {
  std::optional<at::Tensor> center;
  std::optional<at::Tensor> width;
};

// Checks every input of the forward op; names the offending argument in the error. Returns the sizes.
GmmParams check_gmm_args(const char* op, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         const std::optional<at::Tensor>& key_lengths, const at::Tensor& omega, const at::Tensor& mu,
                         const at::Tensor& sigma, const at::Tensor& gate, const LocalBias& local, double scale,
                         int64_t normalization, double sigma_floor);

// Checks the tensors that backward receives beyond forward's inputs.
void check_gmm_backward_extras(const char* op, const GmmParams& p, const at::Tensor& q, const at::Tensor& grad_out,
                               const at::Tensor& lse, const at::Tensor& log_mass, const at::Tensor& alpha_context,
                               const at::Tensor& beta_context);

}  // namespace mma_nmt::gmm
