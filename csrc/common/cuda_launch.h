// How the .cu files launch the hand-written kernels on the GPU: on torch's current CUDA stream, with gpu::Launch's
// default rows per block. nvcc only; the emulated tests launch with emulated_launch() (tests/cpp/emulated).
#pragma once

#include "common/cuda_compat.h"

#if defined(MMA_NMT_EMULATE_CUDA)
#error "common/cuda_launch.h is for the nvcc-compiled .cu files, not for the HIP CPU emulator"
#endif

#include <ATen/cuda/CUDAContext.h>

namespace mma_nmt::gpu {

inline Launch current_launch() { return Launch{at::cuda::getCurrentCUDAStream()}; }

// current_launch() with the current device's opt-in maximum of dynamic shared memory per block (227 KiB on sm90,
// 163 KiB on sm80) as Launch::shared_limit.
inline Launch opt_in_shared_launch() {
  Launch launch = current_launch();
  launch.shared_limit = static_cast<int64_t>(at::cuda::getCurrentDeviceProperties()->sharedMemPerBlockOptin);
  return launch;
}

}  // namespace mma_nmt::gpu
