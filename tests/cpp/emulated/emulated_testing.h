// What the emulated CUDA kernel tests share: the emulated launch, the dtypes tried and the comparison rule.
//
// Each test runs a hand-written CUDA kernel's device source under the HIP CPU runtime (common/cuda_compat.h) on CPU
// tensors and compares its outputs with the CPU operator's on the same inputs. The CPU kernels take float32 and float64
// only, so half-precision runs are compared with the CPU operator on the same (rounded) values in float32.
#pragma once

#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <ostream>
#include <string>

#include "common/cuda_compat.h"

namespace mma_nmt::emulated {

// One warp per block: the emulator's shuffles synchronise the whole block (see gpu::Launch).
inline gpu::Launch emulated_launch() { return gpu::Launch{nullptr, 1}; }

// A dtype the CUDA kernels take, the dtype its CPU reference runs in, and the largest error allowed: |kernel - cpu|
// <= tolerance * (1 + |cpu|). For half precision 4 units of rounding (eps 9.8e-4 for float16, 7.8e-3 for bfloat16):
// inputs are the same, the outputs are rounded once, and gradients read a rounded `out`. For float32, about 80 eps:
// the warp's shuffle tree and the CPU's vector lanes sum products of up to 130 terms in different orders.
struct DtypeCase {
  at::ScalarType dtype;
  at::ScalarType reference_dtype;
  double tolerance;
};

inline std::string dtype_name(at::ScalarType t) { return c10::toString(t); }
inline void PrintTo(const DtypeCase& d, std::ostream* os) { *os << dtype_name(d.dtype); }

const DtypeCase kFloat64{at::kDouble, at::kDouble, 1e-12};
const DtypeCase kFloat32{at::kFloat, at::kFloat, 1e-5};
const DtypeCase kFloat16{at::kHalf, at::kFloat, 4 * 9.77e-4};
const DtypeCase kBFloat16{at::kBFloat16, at::kFloat, 4 * 7.82e-3};
const DtypeCase kAllDtypes[] = {kFloat64, kFloat32, kFloat16, kBFloat16};

// Largest |a - b| / (1 + |b|) over the elements, in float64; equal infinities count as equal, and a NaN or an infinity
// on one side only as an infinite error. Sizes must match.
double scaled_max_error(const at::Tensor& got, const at::Tensor& want);

// Expects scaled_max_error(got, want) <= tolerance and records the error under "<kernel> <dtype> <output>" for the
// summary printed at the end of the run (tests/cpp/emulated/emulated_testing.cpp).
void expect_close(const at::Tensor& got, const at::Tensor& want, const DtypeCase& dtype, const std::string& kernel,
                  const std::string& output);

// For outputs whose float32 rounding error is large by their conditioning (a gradient summing terms that cancel):
// expects the kernel's distance from the CPU operator run in float64 (`exact`) to stay within the tolerance or 4 times
// the float32 CPU operator's own distance from it (`cpu`), whichever is larger; recorded like expect_close.
void expect_as_accurate_as_cpu(const at::Tensor& got, const at::Tensor& cpu, const at::Tensor& exact,
                               const DtypeCase& dtype, const std::string& kernel, const std::string& output);

// Random normal values of `shape`, rounded to the case's dtype.
at::Tensor random_input(at::IntArrayRef shape, const DtypeCase& dtype);

// (B, H, L, D) values as the head view of a (B, L, sets * H * D) projection, taking set `which`: what the models hand
// the kernels. With 2 sets or more (a fused k/v projection) the view is not dense, strides (L sets HD, D, sets HD, 1);
// the other sets hold NaN, so a kernel that reads past its rows fails the comparison.
at::Tensor head_view(const at::Tensor& x, int64_t sets, int64_t which);

// Whether a (B, H, L, D) tensor is stored (B, L, H, D) in memory, as the kernels store their results.
inline bool is_position_major(const at::Tensor& x) { return x.transpose(1, 2).is_contiguous() && !x.is_contiguous(); }

}  // namespace mma_nmt::emulated
