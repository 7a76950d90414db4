// The one switch between the CUDA implementations of an operator (docs/cuda.md has the dispatch table):
//   MMA_NMT_CUDA_KERNELS=handwritten   every operator runs its hand-written CUDA kernels (csrc/*/cuda/*.cuh);
//   MMA_NMT_CUDA_KERNELS=rows          as handwritten, but mma_nmt::attention runs its warp-per-row kernels where it
//                                      would run its tiled ones (attention_tile_kernels.cuh): to compare the two;
//   MMA_NMT_CUDA_KERNELS=flash         mma_nmt::attention calls of one head kind (key padding only for global heads)
//                                      go to torch's FlashAttention-2 with that kind's window at every size
//                                      (attention/flash_plan.h); every other call as unset;
//   unset, or any other value          each call runs the implementation the table gives for its dtype and size:
//                                      in float16/bfloat16 the hand-written kernels, and FlashAttention-2 for
//                                      uniform-kind attention from 256 x 256 query-key pairs; in float32/float64 the
//                                      compositions of PyTorch's fused kernels and GEMMs where they apply; the
//                                      shared-value backward by GEMMs in every dtype.
// Read at every call (a getenv is nothing next to a kernel launch), so tests and benchmarks can flip it in-process.
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdlib>
#include <cstring>

namespace mma_nmt {

inline bool row_warp_attention_kernels_only() {
  const char* value = std::getenv("MMA_NMT_CUDA_KERNELS");
  return value != nullptr && std::strcmp(value, "rows") == 0;
}

inline bool handwritten_cuda_kernels_only() {
  const char* value = std::getenv("MMA_NMT_CUDA_KERNELS");
  return value != nullptr && (std::strcmp(value, "handwritten") == 0 || std::strcmp(value, "rows") == 0);
}

inline bool flash_cuda_kernels_opted_in() {
  const char* value = std::getenv("MMA_NMT_CUDA_KERNELS");
  return value != nullptr && std::strcmp(value, "flash") == 0;
}

// Whether, unless MMA_NMT_CUDA_KERNELS=handwritten, a call in `dtype` takes its operator's composition. Not in
// float16/bfloat16: the H200 lease of 2026-11-28 measured the hand-written kernels ahead of every composition there at
// NMT and decoder sizes (attention, GMM, shared-value: 1.4-10x, the compositions issuing 30-300 launches a call against
// 1-15), and the compositions' fused-kernel calls gave wrong gradients in half precision (attention/sdpa_choice.h;
// benchmarks/results/2026-11-28.nmt-sizes.notes.md). float32 was not measured there and keeps its compositions.
inline bool composition_by_default(c10::ScalarType dtype) {
  return dtype != c10::ScalarType::Half && dtype != c10::ScalarType::BFloat16;
}

}  // namespace mma_nmt
