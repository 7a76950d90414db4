// The one switch between the CUDA implementations of an operator (docs/cuda.md has the dispatch table):
//   MMA_NMT_CUDA_KERNELS=handwritten   every operator runs its hand-written CUDA kernels (csrc/*/cuda/*.cuh), GMM's
//                                      block-per-head kernels with the device's opt-in shared memory (past 48 KiB:
//                                      longer sources, to time them there against the defaults);
//   MMA_NMT_CUDA_KERNELS=rows          as handwritten, but mma_nmt::attention runs its warp-per-row kernels where it
//                                      would run its tiled ones (attention_tile_kernels.cuh), and GMM's block
//                                      kernels keep to 48 KiB (its one-warp-per-row kernels beyond): to compare;
//   MMA_NMT_CUDA_KERNELS=flash         mma_nmt::attention calls of one head kind (key padding only for global heads)
//                                      go to torch's FlashAttention-2 with that kind's window at every size
//                                      (attention/flash_plan.h); every other call as unset;
//   MMA_NMT_CUDA_KERNELS=composition   every operator runs its composition of PyTorch's kernels wherever it has one
//                                      (in float16/bfloat16 the attention composition hands its groups to the
//                                      hand-written kernels, attention/sdpa_choice.h; GMM's takes its dot-product
//                                      half from mma_nmt::attention): to time the compositions against the defaults;
//   unset, or any other value          each call runs the implementation the table gives for its dtype and size:
//                                      the hand-written kernels at NMT and decoder sizes in every dtype; for longer
//                                      calls FlashAttention-2 in float16/bfloat16 and the compositions in
//                                      float32/float64 (GMM's composition in every dtype past its block kernels'
//                                      size, gmm/cuda/gmm_cuda.cu); the shared-value backward by GEMMs in every dtype.
// Read at every call (a getenv is nothing next to a kernel launch), so tests and benchmarks can flip it in-process.
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdlib>
#include <cstring>

namespace mma_nmt {

// Whether MMA_NMT_CUDA_KERNELS is set to `mode`.
inline bool cuda_kernels_mode_is(const char* mode) {
  const char* value = std::getenv("MMA_NMT_CUDA_KERNELS");
  return value != nullptr && std::strcmp(value, mode) == 0;
}

inline bool row_warp_attention_kernels_only() { return cuda_kernels_mode_is("rows"); }

inline bool handwritten_cuda_kernels_only() {
  return cuda_kernels_mode_is("handwritten") || cuda_kernels_mode_is("rows");
}

inline bool flash_cuda_kernels_opted_in() { return cuda_kernels_mode_is("flash"); }

// Whether MMA_NMT_CUDA_KERNELS is exactly `handwritten`: GMM's block-per-head kernels then take the device's opt-in
// shared memory, so that they serve sources past 48 KiB of staged keys and values (gmm/cuda/gmm_cuda.cu).
inline bool handwritten_exactly() { return cuda_kernels_mode_is("handwritten"); }

inline bool composition_cuda_kernels_opted_in() { return cuda_kernels_mode_is("composition"); }

// Whether, without MMA_NMT_CUDA_KERNELS, a call in `dtype` takes its operator's composition; `long_call`: the call is
// past the sizes at which the operator's hand-written kernels lead (the operator's own rule, e.g. flash_by_default for
// attention). Never in float16/bfloat16: the H200 lease of 2026-11-28 measured the hand-written kernels ahead of every
// composition there at NMT and decoder sizes (attention, GMM, shared-value: 1.4-10x, the compositions issuing 30-300
// launches a call against 1-15), and the compositions' fused-kernel calls gave wrong gradients in half precision
// (attention/sdpa_choice.h; benchmarks/results/2026-11-28.nmt-sizes.notes.md); long calls go to FlashAttention-2 there.
// In float32 and float64 only long calls, since 2026-12-02. Until then every float32 call took the composition, which
// the H200 measured behind the plain formula it fuses in float32 (2026-11-26: GLFB attention 0.54x, GMM 0.62x,
// shared-value 0.83x forward+backward) and whose training steps ran at 0.75x the nn.MultiheadAttention model
// (2026-11-29), while the hand-written kernels in float32 were never timed. They compute in float in every dtype, so
// float32 inputs only double their loads, where the compositions' fused kernels lose their half-precision tensor cores
// and keep their 30-300 launches; so they take float32 at NMT sizes too. **Inferred, not measured**: the next lease's
// float32 recheck (scripts/gpu_recheck.sh with NMT_DTYPE=float32) times both (MMA_NMT_CUDA_KERNELS=composition).
inline bool composition_by_default(c10::ScalarType dtype, bool long_call) {
  return dtype != c10::ScalarType::Half && dtype != c10::ScalarType::BFloat16 && long_call;
}

// Whether a call takes its operator's composition under MMA_NMT_CUDA_KERNELS as it is now.
inline bool composition_wanted(c10::ScalarType dtype, bool long_call) {
  if (handwritten_cuda_kernels_only()) return false;
  return composition_cuda_kernels_opted_in() || composition_by_default(dtype, long_call);
}

}  // namespace mma_nmt
