// What the one-warp-per-row CUDA kernels (attention, GMM, the multi-hop head gate) share: the warp size, the row a
// warp owns, the warp-wide sum and the launch shape. Device source for nvcc and the HIP CPU emulator
// (common/cuda_compat.h).
#pragma once

#include "common/cuda_compat.h"  // first: under the emulator torch's headers must precede HIP's

#include <c10/util/Exception.h>

#include <cstdint>

namespace mma_nmt::gpu {

constexpr int kWarpSize = 32;
// Rows per block: Launch::warps_per_block, at most this many (the kernels' launch bounds).
constexpr int kMaxWarpsPerBlock = 4;

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

// Blocks of launch.warps_per_block warps, checked against kMaxWarpsPerBlock; `kernels` names them in the error.
inline dim3 warp_block(const Launch& launch, const char* kernels) {
  TORCH_CHECK(launch.warps_per_block >= 1 && launch.warps_per_block <= kMaxWarpsPerBlock, "mma_nmt ", kernels,
              " kernels: warps_per_block must be in [1, ", kMaxWarpsPerBlock, "], got ", launch.warps_per_block);
  return dim3(static_cast<unsigned>(launch.warps_per_block * kWarpSize));
}

// One warp per row: `warps` of them in blocks of launch.warps_per_block.
struct WarpGrid {
  dim3 grid, block;
};

inline WarpGrid warp_grid(int64_t warps, const Launch& launch, const char* kernels) {
  const dim3 block = warp_block(launch, kernels);
  const int64_t per_block = launch.warps_per_block;
  return {dim3(static_cast<unsigned>((warps + per_block - 1) / per_block)), block};
}

}  // namespace mma_nmt::gpu
