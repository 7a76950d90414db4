// HOST_DEVICE marks arithmetic that the CPU and CUDA kernels share, so that the CPU tests exercise what the GPU runs.
#pragma once

#if defined(__CUDACC__) || defined(__HIPCC__)
#define MMA_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define MMA_HOST_DEVICE inline
#endif

#include <math.h>
#include <stdint.h>

namespace mma_nmt {

// Overloads that pick the single- or double-precision libm call on both host and device.
MMA_HOST_DEVICE float exp_of(float x) { return expf(x); }
MMA_HOST_DEVICE double exp_of(double x) { return exp(x); }
MMA_HOST_DEVICE float log_of(float x) { return logf(x); }
MMA_HOST_DEVICE double log_of(double x) { return log(x); }

template <typename T>
MMA_HOST_DEVICE T negative_infinity() {
  return static_cast<T>(-INFINITY);
}

MMA_HOST_DEVICE int64_t min_of(int64_t a, int64_t b) { return a < b ? a : b; }
MMA_HOST_DEVICE int64_t max_of(int64_t a, int64_t b) { return a > b ? a : b; }

}  // namespace mma_nmt
