// mma_nmt::gmm_attention by composition: the dot-product half by PyTorch's fused SDPA kernels
// (attention/attention_composition.h), the mixture half by one pass over each row's keys (`passes`, mixture_passes.h:
// the CUDA kernels of cuda/mixture_kernels.cuh on the GPU, cpu_mixture_passes() on CPU tensors) around batched GEMMs
// with v. The CUDA backend's first choice (cuda/gmm_cuda.cu). Compiled in every build: on CPU tensors the SDPA
// half runs torch's CPU flash kernel, and tests/cpp/test_gmm_composition.cpp checks every output and gradient against
// the CPU kernel there.
#pragma once

#include <optional>

#include "gmm/gmm_outputs.h"
#include "gmm/gmm_params.h"
#include "gmm/mixture_passes.h"

namespace mma_nmt::gmm {

// Whether the composition computes this call: attention::composable for all-global heads (no zero size; unequal q/k and
// v head sizes are zero-padded there), no localness bias (SDPA's backward gives no gradient of a logit bias, so
// local_center and local_width would get none), no weights asked for (the SDPA half never builds alpha) and the
// mixture in q's dtype (GmmParams::wide_mixture: its gradients would come out in q's).
bool composable(const GmmParams& p, bool return_weights);

// The seven outputs of mma_nmt::gmm_attention (weights (0,)), or nullopt where the call is not composable or torch has
// no fused kernel for these inputs (then the caller runs the hand-written kernel). Arguments checked.
std::optional<GmmForwardResult> gmm_forward_by_composition(const GmmParams& p, const at::Tensor& q, const at::Tensor& k,
                                                           const at::Tensor& v,
                                                           const std::optional<at::Tensor>& key_lengths,
                                                           const at::Tensor& omega, const at::Tensor& mu,
                                                           const at::Tensor& sigma, const at::Tensor& gate,
                                                           bool return_weights, const MixturePasses& passes);

// The nine gradients of mma_nmt::gmm_attention_backward (local-bias ones (0,)) from either backend's saved statistics
// (both give the same lse, log_mass and contexts), or nullopt as above.
std::optional<GmmBackwardResult> gmm_backward_by_composition(
    const GmmParams& p, const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const std::optional<at::Tensor>& key_lengths, const at::Tensor& omega, const at::Tensor& mu,
    const at::Tensor& sigma, const at::Tensor& gate, const at::Tensor& lse, const at::Tensor& alpha_context,
    const at::Tensor& beta_context, const MixturePasses& passes);

}  // namespace mma_nmt::gmm
