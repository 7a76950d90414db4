// The two passes of the composition's mixture half (gmm_composition.cpp) over every query row of a call, run by the
// CUDA kernels of cuda/mixture_kernels.cuh on the GPU (one launch each way) and by cpu/mixture_passes_cpu.cpp on CPU
// tensors (the tests). Both evaluate mixture_rows.h.
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <optional>

#include "gmm/gmm_params.h"
#include "gmm/mixture_rows.h"

namespace mma_nmt::gmm {

// The mixture of a call in the accumulation dtype: omega, mu and sigma (B, H, T, K) contiguous, key lengths (B,).
struct MixtureInputs {
  at::Tensor omega, mu, sigma;
  at::Tensor key_lengths;  // undefined without padding
};

// omega, mu and sigma converted to `acc` and made contiguous (no copy where they are already), the lengths contiguous.
MixtureInputs mixture_inputs(const at::Tensor& omega, const at::Tensor& mu, const at::Tensor& sigma,
                             const std::optional<at::Tensor>& key_lengths, at::ScalarType acc);

struct MixtureForward {
  at::Tensor beta;      // (B, H, T, S): u scaled as the normalisation says, 0 past each sentence
  at::Tensor log_mass;  // (B, H, T): log sum_j of the unshifted mixture, -inf without mass
};

struct MixtureBackward {
  at::Tensor beta;                           // as MixtureForward's
  at::Tensor delta_b;                        // (B, H, T): dO . B = sum_j beta_j x_j
  at::Tensor grad_omega, grad_mu, grad_sigma;  // (B, H, T, K)
};

// forward(p, mixture) and backward(p, mixture, gate (B, H, T), x (B, H, T, S) = dO v^T), all in the accumulation
// dtype and contiguous; x past a sentence's keys is never read.
struct MixturePasses {
  std::function<MixtureForward(const GmmParams&, const MixtureInputs&)> forward;
  std::function<MixtureBackward(const GmmParams&, const MixtureInputs&, const at::Tensor& gate, const at::Tensor& x)>
      backward;
};

// The CPU loops, for CPU tensors: a row per thread (at::parallel_for).
MixturePasses cpu_mixture_passes();

// The outputs of each pass, allocated like the mixture's inputs.
MixtureForward allocate_mixture_forward(const GmmParams& p, const MixtureInputs& in);
MixtureBackward allocate_mixture_backward(const GmmParams& p, const MixtureInputs& in);

// The rows as mixture_rows.h reads them.
template <typename acc_t>
MixtureCall<acc_t> mixture_call(const GmmParams& p, const MixtureInputs& in) {
  return {in.omega.data_ptr<acc_t>(),
          in.mu.data_ptr<acc_t>(),
          in.sigma.data_ptr<acc_t>(),
          in.key_lengths.defined() ? in.key_lengths.data_ptr<int64_t>() : nullptr,
          p.batch * p.heads * p.query_len,
          p.heads,
          p.query_len,
          p.key_len,
          p.components,
          p.normalization,
          static_cast<acc_t>(p.sigma_floor)};
}

// MixtureBackward's gradients as mixture_rows.h writes them, at row 0.
template <typename acc_t>
MixtureRowGrads<acc_t> mixture_grads_out(const MixtureBackward& b) {
  return {b.grad_omega.data_ptr<acc_t>(), b.grad_mu.data_ptr<acc_t>(), b.grad_sigma.data_ptr<acc_t>()};
}

}  // namespace mma_nmt::gmm
