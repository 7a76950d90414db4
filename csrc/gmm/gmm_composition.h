// mma_nmt::gmm_attention by composition: the dot-product half by mma_nmt::attention with every head global, the
// mixture half by one pass over each row's keys each way (mixture_passes.h), around batched GEMMs with v. The CUDA
// backend's choice for calls past the block-per-head kernels' size (cuda/gmm_cuda.cu). Compiled in every build: on CPU
// tensors tests/cpp/test_gmm_composition.cpp checks every output and gradient against the CPU kernel, and
// tests/cpp/emulated/test_emulated_gmm_mixture.cpp runs it with the CUDA kernels under the emulator.
#pragma once

#include <optional>

#include "attention/attention_composition.h"
#include "gmm/gmm_outputs.h"
#include "gmm/gmm_params.h"
#include "gmm/mixture_passes.h"

namespace mma_nmt::gmm {

// The kernels the composition calls: `dot` for alpha v (attention::dispatched_attention_kernels(), the operator itself:
// on the GPU FlashAttention-2 for long half-precision calls, its tiled kernels at decoder sizes, its SDPA composition
// for long float32 calls; the CPU kernel on CPU tensors), `mixture` for beta (cuda/mixture_kernels.cuh on the GPU,
// cpu_mixture_passes() on CPU tensors).
struct CompositionKernels {
  attention::AttentionKernels dot;
  MixturePasses mixture;
};

// The kernels for CPU tensors: mma_nmt::attention's CPU kernel and cpu_mixture_passes().
CompositionKernels cpu_composition_kernels();

// Whether the composition computes this call: every size nonzero (attention::splittable for all-global heads), no
// localness bias (mma_nmt::attention takes no logit bias) and no weights asked for (the attention is asked for none).
// The mixture may be in float32 beside half-precision q (GmmParams::wide_mixture, CUDA autocast's call): the passes
// compute in float32 anyway, and its gradients come back in its own dtype.
bool composable(const GmmParams& p, bool return_weights);

// The seven outputs of mma_nmt::gmm_attention (weights (0,)), or nullopt where the call is not composable (then the
// caller runs the hand-written kernel). Arguments checked.
std::optional<GmmForwardResult> gmm_forward_by_composition(const GmmParams& p, const at::Tensor& q, const at::Tensor& k,
                                                           const at::Tensor& v,
                                                           const std::optional<at::Tensor>& key_lengths,
                                                           const at::Tensor& omega, const at::Tensor& mu,
                                                           const at::Tensor& sigma, const at::Tensor& gate,
                                                           bool return_weights, const CompositionKernels& kernels);

// The nine gradients of mma_nmt::gmm_attention_backward (local-bias ones (0,)) from either backend's saved statistics
// (both give the same lse, log_mass and contexts), or nullopt as above. beta_context is not read: the mixture's pass
// sums dO . B again as sum_j beta_j (dO . v_j).
std::optional<GmmBackwardResult> gmm_backward_by_composition(
    const GmmParams& p, const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const std::optional<at::Tensor>& key_lengths, const at::Tensor& omega, const at::Tensor& mu,
    const at::Tensor& sigma, const at::Tensor& gate, const at::Tensor& lse, const at::Tensor& alpha_context,
    const at::Tensor& beta_context, const CompositionKernels& kernels);

}  // namespace mma_nmt::gmm
