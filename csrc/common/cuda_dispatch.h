// The one switch between the CUDA implementations of an operator (docs/cuda.md has the dispatch table):
//   MMA_NMT_CUDA_KERNELS=handwritten   every operator runs its hand-written CUDA kernels (csrc/*/cuda/*.cuh);
//   MMA_NMT_CUDA_KERNELS=flash         opt-in, not yet run on a GPU: mma_nmt::attention calls of one head kind without
//                                      key padding go to torch's FlashAttention-2 with that kind's window
//                                      (attention/flash_plan.h); every other call as unset;
//   unset, or any other value          each call runs the fastest implementation the table gives (composition of
//                                      PyTorch's fused kernels and GEMMs where it applies).
// Read at every call (a getenv is nothing next to a kernel launch), so tests and benchmarks can flip it in-process.
#pragma once

#include <cstdlib>
#include <cstring>

namespace mma_nmt {

inline bool handwritten_cuda_kernels_only() {
  const char* value = std::getenv("MMA_NMT_CUDA_KERNELS");
  return value != nullptr && std::strcmp(value, "handwritten") == 0;
}

inline bool flash_cuda_kernels_opted_in() {
  const char* value = std::getenv("MMA_NMT_CUDA_KERNELS");
  return value != nullptr && std::strcmp(value, "flash") == 0;
}

}  // namespace mma_nmt
