// What the one-warp-per-row CUDA kernels (attention, GMM, the multi-hop head gate) share: the warp size, the row a
// warp owns and the warp-wide sum. Device source for nvcc and the HIP CPU emulator (common/cuda_compat.h).
#pragma once

#include "common/cuda_compat.h"  // first: under the emulator torch's headers must precede HIP's

#include <cstdint>

namespace mma_nmt::gpu {

constexpr int kWarpSize = 32;

// The row (position, key, ...) of this warp, with blocks of blockDim.x / kWarpSize warps one after another.
__device__ __forceinline__ int64_t warp_index() {
  const int64_t warps_per_block = blockDim.x / kWarpSize;
  return static_cast<int64_t>(blockIdx.x) * warps_per_block + threadIdx.x / kWarpSize;
}

// Sum over the 32 lanes, returned to every lane.
template <typename acc_t>
__device__ __forceinline__ acc_t warp_sum(acc_t x) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

}  // namespace mma_nmt::gpu
