// What the one-warp-per-row CUDA kernels (attention, GMM, the multi-hop head gate) share: the warp size, the row a
// warp owns, the warp-wide sum, a lane's slice of a row in registers (load, store, dot product) and the launch
// shape. Device source for nvcc and the HIP CPU emulator (common/cuda_compat.h).
#pragma once

#include "common/cuda_compat.h"  // first: under the emulator torch's headers must precede HIP's

#include <c10/util/Exception.h>

#include <cstdint>

#include "common/host_device.h"

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

// Maximum over the 32 lanes, returned to every lane.
template <typename acc_t>
__device__ __forceinline__ acc_t warp_max(acc_t x) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    const acc_t other = __shfl_xor_sync(0xffffffffu, x, offset);
    x = other > x ? other : x;
  }
  return x;
}

// Row stride of a key or value row staged in shared memory: one extra 4-byte word, so that 32 lanes reading one row
// each hit 32 different banks.
template <typename scalar_t>
MMA_HOST_DEVICE int64_t staged_stride(int64_t dim) {
  return dim + (sizeof(scalar_t) >= 4 ? 1 : static_cast<int64_t>(4 / sizeof(scalar_t)));
}

// Orders a warp's shared-memory writes before its lanes read each other's: __syncwarp on the GPU; under the emulator,
// whose kernels that need it run one warp per block, the block barrier.
__device__ __forceinline__ void warp_sync() {
#if defined(MMA_NMT_EMULATE_CUDA)
  __syncthreads();
#else
  __syncwarp();
#endif
}

// A lane's register slice of a row of `dim` values: element e holds index lane + 32 * e, for lane = threadIdx.x % 32.
// kPerLane * 32 must cover the largest `dim` a kernel is launched for (its launcher checks it).
template <int kPerLane, typename acc_t, typename scalar_t>
__device__ __forceinline__ void load_slice(const scalar_t* row, int64_t dim, acc_t (&slice)[kPerLane]) {
  const int lane = threadIdx.x % kWarpSize;
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) {
    const int64_t d = lane + e * kWarpSize;
    slice[e] = d < dim ? static_cast<acc_t>(row[d]) : acc_t(0);  // zero past the end
  }
}

// Writes slice * factor back to the row's first `dim` values.
template <int kPerLane, typename acc_t, typename scalar_t>
__device__ __forceinline__ void store_slice(scalar_t* row, int64_t dim, const acc_t (&slice)[kPerLane], acc_t factor) {
  const int lane = threadIdx.x % kWarpSize;
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) {
    const int64_t d = lane + e * kWarpSize;
    if (d < dim) row[d] = static_cast<scalar_t>(slice[e] * factor);
  }
}

// Full dot product of a register slice with a row of `dim` values in memory, returned to every lane: each lane sums its
// elements in order e = 0, 1, ..., then warp_sum adds the lanes.
template <int kPerLane, typename acc_t, typename scalar_t>
__device__ __forceinline__ acc_t warp_dot(const acc_t (&slice)[kPerLane], const scalar_t* row, int64_t dim) {
  const int lane = threadIdx.x % kWarpSize;
  acc_t part = 0;
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) {
    const int64_t d = lane + e * kWarpSize;
    if (d < dim) part += slice[e] * static_cast<acc_t>(row[d]);
  }
  return warp_sum(part);
}

// Dot product of two rows of `dim` values in memory, returned to every lane: lane l sums elements l, l + 32, ... in
// order (coalesced reads, any dim), then warp_sum adds the lanes. Two calls on equal rows give equal sums, bit for bit.
template <typename acc_t, typename scalar_t>
__device__ __forceinline__ acc_t warp_row_dot(const scalar_t* a, const scalar_t* b, int64_t dim) {
  acc_t part = 0;
  for (int64_t d = threadIdx.x % kWarpSize; d < dim; d += kWarpSize) {
    part += static_cast<acc_t>(a[d]) * static_cast<acc_t>(b[d]);
  }
  return warp_sum(part);
}

// The GPU's launches (gpu::current_launch) take Launch's default rows per block: the most the kernels are built for.
static_assert(Launch{}.warps_per_block == kMaxWarpsPerBlock, "gpu::Launch's default warps_per_block is the bound");

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
