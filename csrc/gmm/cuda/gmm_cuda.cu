// CUDA implementation of mma_nmt::gmm_attention and mma_nmt::gmm_attention_backward (float32, float16, bfloat16 and
// float64; accumulation in float, or double for float64): argument checks and the device guard, then the launches of
// gmm_launch.cuh on the current stream; where a head's keys and values do not fit the block-per-head kernels, the
// composition (gmm_composition.h: mma_nmt::attention, the mixture kernels of mixture_kernels.cuh and batched GEMMs)
// where the call is composable.
// MMA_NMT_CUDA_KERNELS=handwritten or =composition forces either (common/cuda_dispatch.h); under handwritten the
// block-per-head kernels take the device's opt-in shared memory, so they serve sources up to about 420 keys (float32,
// D 64, K 4 on sm90) where 48 KiB stops them at about 85 (gmm_launch).
#include "gmm/cuda/gmm_launch.cuh"  // first: it includes common/cuda_compat.h
#include "gmm/cuda/mixture_kernels.cuh"

#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "attention/operator_kernels.h"
#include "common/cuda_dispatch.h"
#include "common/cuda_launch.h"
#include "gmm/gmm_composition.h"

namespace mma_nmt::gmm::cuda {
namespace {

void check_cuda_limits(const char* op, const GmmParams& p, const at::Tensor& q) {
  TORCH_CHECK_VALUE(q.is_cuda(), op, ": the CUDA kernel got q on ", q.device());
  TORCH_CHECK_VALUE(p.head_dim <= kWarp * kMaxPerLane && p.value_dim <= kWarp * kMaxPerLane, op,
                    ": the CUDA kernel supports head_dim and value_dim up to ", kWarp * kMaxPerLane, ", got ",
                    p.head_dim, " and ", p.value_dim);
  TORCH_CHECK_VALUE(p.components <= kMaxComponents, op, ": the CUDA kernel supports up to ", kMaxComponents,
                    " components, got ", p.components);
}

// The launch of a call's kernels. The block-per-head kernels' size rule (head_blocks_fit) reads its shared_limit:
// 48 KiB by default, where the H200 measured them (decoder sizes, 2026-11-29); the device's opt-in maximum under
// MMA_NMT_CUDA_KERNELS=handwritten, which benchmarks.cuda_nmt_sizes times against the defaults past 48 KiB (T = S =
// 128 and 256) before that range's default changes. Unmeasured there: past 57 KiB fewer than 4 blocks fit on an SM
// (one past 114 KiB on sm90), against the composition (mma_nmt::attention, the mixture kernels and GEMMs: 10 + 18 ops
// a forward+backward by the CPU count at K 2, 180 until 2026-12-03) or the row kernels' key-by-key loop.
gpu::Launch gmm_launch() {
  return handwritten_exactly() ? gpu::opt_in_shared_launch() : gpu::current_launch();
}

// The composition's kernels on the GPU: mma_nmt::attention as the operator runs it for the call, and the mixture
// kernels (mixture_kernels.cuh).
CompositionKernels composition_kernels(const gpu::Launch& launch) {
  return {attention::dispatched_attention_kernels(), kernel_mixture_passes(launch)};
}

// Whether a call takes the composition (gmm_composition.h): past the block-per-head kernels' size in every dtype. The
// alternative there is the one-warp-per-row kernels, which the H200 measured behind even the composition of
// 2026-11-28 (bfloat16, B 128, T = S = 64: 8.16 against 4.44 ms forward+backward), when that composition issued about
// 240 launches a call and its SDPA half gave wrong half-precision gradients (why half precision stayed on the row
// kernels). Since 2026-12-03 its dot-product half is mma_nmt::attention (in half precision FlashAttention-2 or the
// tiled kernels) and its mixture one kernel each way: inferred ahead of the row kernels there, **not measured**.
// MMA_NMT_CUDA_KERNELS=handwritten or =rows: never; =composition: at every size.
bool gmm_composition_wanted(bool long_call) {
  if (handwritten_cuda_kernels_only()) return false;
  return composition_cuda_kernels_opted_in() || long_call;
}

GmmForwardResult gmm_attention_cuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                    const std::optional<at::Tensor>& key_lengths, const at::Tensor& omega,
                                    const at::Tensor& mu, const at::Tensor& sigma, const at::Tensor& gate,
                                    const std::optional<at::Tensor>& local_center,
                                    const std::optional<at::Tensor>& local_width, double scale, int64_t normalization,
                                    double sigma_floor, bool return_weights) {
  const char* op = "mma_nmt.gmm_attention";
  const LocalBias local{local_center, local_width};
  const GmmParams p =
      check_gmm_args(op, q, k, v, key_lengths, omega, mu, sigma, gate, local, scale, normalization, sigma_floor);
  check_cuda_limits(op, p, q);
  const c10::cuda::CUDAGuard guard(q.device());
  const gpu::Launch launch = gmm_launch();
  const bool long_call = !head_blocks_fit(p, q.scalar_type(), /*backward=*/false, launch);
  if (gmm_composition_wanted(long_call)) {
    if (auto result = gmm_forward_by_composition(p, q, k, v, key_lengths, omega, mu, sigma, gate, return_weights,
                                                 composition_kernels(launch))) {
      return *result;
    }
  }
  return run_gmm_forward(p, kernel_inputs(q, k, v, key_lengths, omega, mu, sigma, gate, local), return_weights,
                         launch);
}

GmmBackwardResult gmm_attention_backward_cuda(
    const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const std::optional<at::Tensor>& key_lengths, const at::Tensor& omega, const at::Tensor& mu,
    const at::Tensor& sigma, const at::Tensor& gate, const std::optional<at::Tensor>& local_center,
    const std::optional<at::Tensor>& local_width, const at::Tensor& lse, const at::Tensor& log_mass,
    const at::Tensor& alpha_context, const at::Tensor& beta_context, double scale, int64_t normalization,
    double sigma_floor) {
  const char* op = "mma_nmt.gmm_attention_backward";
  const LocalBias local{local_center, local_width};
  const GmmParams p =
      check_gmm_args(op, q, k, v, key_lengths, omega, mu, sigma, gate, local, scale, normalization, sigma_floor);
  check_cuda_limits(op, p, q);
  check_gmm_backward_extras(op, p, q, grad_out, lse, log_mass, alpha_context, beta_context);
  const c10::cuda::CUDAGuard guard(q.device());
  // Either backend's saved statistics serve either backward (gmm_composition.h), so the choice is made again here.
  const gpu::Launch launch = gmm_launch();
  const bool long_call = !head_blocks_fit(p, q.scalar_type(), /*backward=*/true, launch);
  if (gmm_composition_wanted(long_call)) {
    if (auto grads = gmm_backward_by_composition(p, grad_out, q, k, v, key_lengths, omega, mu, sigma, gate, lse,
                                                 alpha_context, beta_context, composition_kernels(launch))) {
      return *grads;
    }
  }
  Inputs in = kernel_inputs(q, k, v, key_lengths, omega, mu, sigma, gate, local);
  in.dout = rows_contiguous(grad_out);
  return run_gmm_backward(p, in, {lse, log_mass, alpha_context, beta_context}, launch);
}

}  // namespace

TORCH_LIBRARY_IMPL(mma_nmt, CUDA, m) {
  m.impl("gmm_attention", &gmm_attention_cuda);
  m.impl("gmm_attention_backward", &gmm_attention_backward_cuda);
}

}  // namespace mma_nmt::gmm::cuda
