// The CUDA names the hand-written kernels use, for both compilers of their device source (the .cuh files):
//   - nvcc, for the GPU (the .cu files, which launch the kernels on the current CUDA stream);
//   - the host compiler with the HIP CPU runtime (MMA_NMT_EMULATE_CUDA defined), for tests/cpp/emulated, which runs
//     the same kernels on the CPU and compares them with the CPU kernels.
// Device source includes this header instead of cuda_runtime.h and uses only what both sides have: threadIdx,
// blockIdx, blockDim, __syncthreads, atomicAdd on float/double, __shared__, __shfl_xor_sync with the full mask, and
// from here MMA_NMT_DYNAMIC_SHARED and gpu::launch_kernel.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

#if defined(MMA_NMT_EMULATE_CUDA)

// Torch's headers before HIP's: HIP defines __device__, __host__, __HIPCC__ and friends as macros, which would change
// what the c10 headers compile. Everything the device source needs from torch is included here, first.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>

// Before HIP too, so that MMA_HOST_DEVICE is decided while __HIPCC__ is still undefined: plain `inline`.
#include "common/host_device.h"

#include <hip/hip_runtime.h>

// HIP CPU marks device functions __attribute__((simd)) and kernels (flatten, simd) for GCC, and __forceinline__ is
// empty without NDEBUG, so header functions would be defined once per translation unit. The kernels need none of it:
// plain inline functions. (`flatten` is kept off as well: the kernels' frames must fit the emulator's 7 KiB fiber
// stacks whatever is inlined; tests/cpp/emulated checks the frame sizes with -Wstack-usage.)
#undef __device__
#define __device__
#undef __forceinline__
#define __forceinline__ inline
#undef __global__
#define __global__

// CUDA's warp shuffle onto HIP's. The emulator's warpSize is 64, so the width of a CUDA warp is passed explicitly. Its
// shuffles synchronise the whole block: a kernel whose warps take different paths must run one warp per block there.
template <typename T>
inline T __shfl_xor_sync(unsigned /*mask: the kernels pass the full warp*/, T value, int lane_mask, int width = 32) {
  return __shfl_xor(value, lane_mask, width);
}

#define MMA_NMT_DYNAMIC_SHARED(type, name) HIP_DYNAMIC_SHARED(type, name)

namespace mma_nmt::gpu {
using Stream = hipStream_t;
}  // namespace mma_nmt::gpu

#else  // nvcc

#include <c10/cuda/CUDAException.h>
#include <cuda_runtime.h>

#define MMA_NMT_DYNAMIC_SHARED(type, name)           \
  extern __shared__ unsigned char name##_storage[]; \
  type* name = reinterpret_cast<type*>(name##_storage)

namespace mma_nmt::gpu {
using Stream = cudaStream_t;
}  // namespace mma_nmt::gpu

#endif

namespace mma_nmt::gpu {

constexpr int64_t kBlockSharedLimit = 48 * 1024;  // bytes: the shared memory a launch gets without opting in

// Where and how a launcher runs its kernels.
struct Launch {
  Stream stream = nullptr;
  // Rows per block of the one-warp-per-row kernels (attention, GMM): 4 on the GPU keeps short sequences spread over
  // the SMs; the emulator needs 1, as warps of one block that loop different numbers of times would desynchronise its
  // block-wide shuffles. The kernels read it back as blockDim.x / 32.
  int warps_per_block = 4;
  // The dynamic shared memory a block of the GMM block-per-head kernels may take: 48 KiB, or the device's opt-in
  // maximum where the launcher asks for it (gmm_cuda.cu; launch_kernel then opts the kernel in).
  int64_t shared_limit = kBlockSharedLimit;
};

// kernel<<<grid, block, shared_bytes, stream>>>(args...), with torch's launch check on the GPU. Under the emulator
// the launch is synchronous, so that host code after it (reading or casting outputs) sees the kernel's results as
// work on the same CUDA stream would.
template <typename... Params, typename... Args>
void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes, const Launch& launch,
                   Args&&... args) {
#if defined(MMA_NMT_EMULATE_CUDA)
  hipLaunchKernelGGL(kernel, grid, block, static_cast<std::uint32_t>(shared_bytes), launch.stream,
                     std::forward<Args>(args)...);
  const hipError_t status = hipDeviceSynchronize();
  TORCH_CHECK(status == hipSuccess, "emulated kernel launch failed: ", hipGetErrorString(status));
#else
  if (shared_bytes > static_cast<size_t>(kBlockSharedLimit)) {
    // Past 48 KiB a kernel runs only once opted in; its launcher checked the size against Launch::shared_limit.
    C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(shared_bytes)));
  }
  kernel<<<grid, block, shared_bytes, launch.stream>>>(std::forward<Args>(args)...);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
#endif
}

}  // namespace mma_nmt::gpu
