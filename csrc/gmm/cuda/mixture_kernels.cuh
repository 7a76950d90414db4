// The composition's mixture passes on the GPU (mixture_passes.h): one warp per query row, keys in lanes, one launch
// each way. Replaces the ATen ops that built the (B, H, T, S) mixture one elementwise pass per component (and again
// for each of the three gradient sums in backward), about 30 forward and 70 backward launches at K = 2. Device source
// and device-agnostic host code: gmm_cuda.cu runs it on the current stream, tests/cpp/emulated under the HIP CPU
// emulator.
#pragma once

#include "gmm/cuda/gmm_launch.cuh"  // first: it includes common/cuda_compat.h

#include <ATen/record_function.h>

#include <vector>

#include "gmm/mixture_passes.h"

namespace mma_nmt::gmm::cuda {

// mixture_rows.h's lanes as a warp's.
struct WarpLanes {
  int lane;
  int count = kWarp;
  template <typename acc_t>
  __device__ acc_t sum(acc_t x) const {
    return warp_sum(x);
  }
};

template <typename acc_t>
__global__ void mixture_forward_kernel(MixtureCall<acc_t> call, acc_t* beta, acc_t* log_mass) {
  const int64_t row = warp_index();
  if (row >= call.rows) return;  // the whole warp: rows are warp-uniform
  const int lane = threadIdx.x % kWarp;
  Component<acc_t> comps[kMaxComponents];
  const acc_t value = mixture_row_forward(call.row(row), comps, WarpLanes{lane}, beta + row * call.key_len);
  if (lane == 0) log_mass[row] = value;
}

template <typename acc_t>
__global__ void mixture_backward_kernel(MixtureCall<acc_t> call, const acc_t* x, const acc_t* gate, acc_t* beta,
                                        acc_t* delta_b, MixtureRowGrads<acc_t> grads) {
  const int64_t row = warp_index();
  if (row >= call.rows) return;
  const int lane = threadIdx.x % kWarp;
  Component<acc_t> comps[kMaxComponents];
  const int64_t first = row * call.key_len;
  const acc_t value = mixture_row_backward(call.row(row), comps, WarpLanes{lane}, x + first, gate[row], beta + first,
                                           grads.row(row, call.components));
  if (lane == 0) delta_b[row] = value;
}

inline void check_components(const GmmParams& p) {
  TORCH_CHECK(p.components <= kMaxComponents, "mma_nmt GMM mixture kernels: at most ", kMaxComponents,
              " components, got ", p.components);
}

// The passes as kernels launched by `launch` (its stream and warps per block).
inline MixturePasses kernel_mixture_passes(const gpu::Launch& launch) {
  MixturePasses passes;
  passes.forward = [launch](const GmmParams& p, const MixtureInputs& in) {
    check_components(p);
    RECORD_FUNCTION("mma_nmt::gmm_mixture_forward", std::vector<c10::IValue>());
    MixtureForward out = allocate_mixture_forward(p, in);
    const WarpGrid rows = warp_grid(p.batch * p.heads * p.query_len, launch);
    if (p.batch * p.heads * p.query_len == 0) return out;
    AT_DISPATCH_FLOATING_TYPES(in.omega.scalar_type(), "mma_nmt GMM mixture forward", [&] {
      gpu::launch_kernel(&mixture_forward_kernel<scalar_t>, rows.grid, rows.block, 0, launch,
                         mixture_call<scalar_t>(p, in), out.beta.data_ptr<scalar_t>(),
                         out.log_mass.data_ptr<scalar_t>());
    });
    return out;
  };
  passes.backward = [launch](const GmmParams& p, const MixtureInputs& in, const at::Tensor& gate,
                             const at::Tensor& x) {
    check_components(p);
    RECORD_FUNCTION("mma_nmt::gmm_mixture_backward", std::vector<c10::IValue>());
    MixtureBackward out = allocate_mixture_backward(p, in);
    const WarpGrid rows = warp_grid(p.batch * p.heads * p.query_len, launch);
    if (p.batch * p.heads * p.query_len == 0) return out;
    AT_DISPATCH_FLOATING_TYPES(in.omega.scalar_type(), "mma_nmt GMM mixture backward", [&] {
      gpu::launch_kernel(&mixture_backward_kernel<scalar_t>, rows.grid, rows.block, 0, launch,
                         mixture_call<scalar_t>(p, in), x.data_ptr<scalar_t>(), gate.data_ptr<scalar_t>(),
                         out.beta.data_ptr<scalar_t>(), out.delta_b.data_ptr<scalar_t>(),
                         mixture_grads_out<scalar_t>(out));
    });
    return out;
  };
  return passes;
}

}  // namespace mma_nmt::gmm::cuda
