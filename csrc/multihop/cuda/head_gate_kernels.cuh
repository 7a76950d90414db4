// CUDA kernels of mma_nmt::multihop_gate and its backward, and their launches for checked arguments. One warp per
// position (sentence, t): lanes split the hidden units (Db) and the value dimensions (Dc), so every load and store of
// a head's row is coalesced, and each head's score (forward) or dL/dbeta (backward) is a warp sum. The softmax over
// the H heads runs on every lane with the arithmetic of multihop/head_gate.h. Backward writes each position's share
// of grad_v_b to its own row, summed afterwards (no atomics: the same result on every run). Accumulates in float
// (double for double); float32, float16, bfloat16 and float64 inputs.
//
// Device source and device-agnostic launch code: compiled by nvcc (multihop_cuda.cu) and under the HIP CPU emulator
// (tests/cpp/emulated).
#pragma once

#include "common/cuda_compat.h"  // first: under the emulator torch's headers must precede HIP's

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>

#include <optional>
#include <tuple>

#include "common/warp.cuh"
#include "multihop/head_gate.h"
#include "multihop/multihop_params.h"

namespace mma_nmt::multihop::cuda {

using gpu::kWarpSize;

template <typename scalar_t, typename acc_t>
__global__ void head_gate_forward_kernel(HeadGateParams p, const scalar_t* __restrict__ wq,
                                         const scalar_t* __restrict__ ua, const scalar_t* __restrict__ uc,
                                         const scalar_t* __restrict__ v_b, scalar_t* __restrict__ out,
                                         scalar_t* __restrict__ gate) {
  const int64_t n = gpu::warp_index();
  if (n >= p.batch * p.query_len) return;  // the spare warps of the last block, whole warps
  const int lane = threadIdx.x % kWarpSize;
  acc_t beta[kMaxHeads];
  for (int64_t h = 0; h < p.heads; ++h) {
    const int64_t row = head_row(n, h, p.heads, p.query_len);
    beta[h] = gpu::warp_sum(head_score_part<scalar_t, acc_t>(wq + row * p.hop_dim, ua + row * p.hop_dim, v_b,
                                                             p.hop_dim, lane, kWarpSize));
  }
  softmax_over_heads(beta, p.heads);
  for (int64_t h = 0; h < p.heads; ++h) {
    const int64_t row = head_row(n, h, p.heads, p.query_len);
    if (lane == 0) gate[row] = static_cast<scalar_t>(beta[h]);
    for (int64_t c = lane; c < p.value_dim; c += kWarpSize) {
      out[row * p.value_dim + c] = static_cast<scalar_t>(beta[h] * static_cast<acc_t>(uc[row * p.value_dim + c]));
    }
  }
}

// dv_b_rows (B * T, Db): position n's share sum_h de_h tanh(pre_h), summed over the positions by the launcher.
template <typename scalar_t, typename acc_t>
__global__ void head_gate_backward_kernel(HeadGateParams p, const scalar_t* __restrict__ dout,
                                          const scalar_t* __restrict__ dgate, const scalar_t* __restrict__ wq,
                                          const scalar_t* __restrict__ ua, const scalar_t* __restrict__ uc,
                                          const scalar_t* __restrict__ v_b, const scalar_t* __restrict__ gate,
                                          scalar_t* __restrict__ dpre, scalar_t* __restrict__ duc,
                                          acc_t* __restrict__ dv_b_rows) {
  const int64_t n = gpu::warp_index();
  if (n >= p.batch * p.query_len) return;  // the spare warps of the last block, whole warps
  const int lane = threadIdx.x % kWarpSize;
  acc_t beta[kMaxHeads], de[kMaxHeads];
  for (int64_t h = 0; h < p.heads; ++h) {
    const int64_t row = head_row(n, h, p.heads, p.query_len);
    beta[h] = static_cast<acc_t>(gate[row]);
    acc_t part = 0;  // this lane's share of dL/dbeta_h = dgate + dout . uc
    for (int64_t c = lane; c < p.value_dim; c += kWarpSize) {
      const acc_t d = static_cast<acc_t>(dout[row * p.value_dim + c]);
      part += d * static_cast<acc_t>(uc[row * p.value_dim + c]);
      duc[row * p.value_dim + c] = static_cast<scalar_t>(beta[h] * d);
    }
    de[h] = gpu::warp_sum(part) + (dgate != nullptr ? static_cast<acc_t>(dgate[row]) : acc_t(0));
  }
  softmax_over_heads_backward(beta, de, p.heads);
  acc_t* dv_b_row = dv_b_rows + n * p.hop_dim;
  for (int64_t d = lane; d < p.hop_dim; d += kWarpSize) {
    const acc_t v = static_cast<acc_t>(v_b[d]);
    acc_t share = 0;
    for (int64_t h = 0; h < p.heads; ++h) {
      const int64_t i = head_row(n, h, p.heads, p.query_len) * p.hop_dim + d;
      const acc_t u = tanh_of(static_cast<acc_t>(wq[i]) + static_cast<acc_t>(ua[i]));
      dpre[i] = static_cast<scalar_t>(de[h] * v * (acc_t(1) - u * u));
      share += de[h] * u;
    }
    dv_b_row[d] = share;
  }
}

// One warp per position, in blocks of launch.warps_per_block.
inline gpu::WarpGrid position_grid(const HeadGateParams& p, const gpu::Launch& launch) {
  return gpu::warp_grid(p.positions(), launch, "multihop_gate");
}

// (out, gate) of mma_nmt::multihop_gate for checked arguments.
inline std::tuple<at::Tensor, at::Tensor> run_head_gate_forward(const HeadGateParams& p, const at::Tensor& query_proj,
                                                                const at::Tensor& head_proj,
                                                                const at::Tensor& value_proj, const at::Tensor& v_b,
                                                                const gpu::Launch& launch) {
  const at::Tensor wq = query_proj.contiguous(), ua = head_proj.contiguous(), uc = value_proj.contiguous();
  const at::Tensor vb = v_b.contiguous();
  at::Tensor out = at::empty({p.batch, p.heads, p.query_len, p.value_dim}, query_proj.options());
  at::Tensor gate = at::empty({p.batch, p.heads, p.query_len}, query_proj.options());
  if (p.positions() == 0) return {out, gate};
  const gpu::WarpGrid shape = position_grid(p, launch);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, wq.scalar_type(), "mma_nmt::multihop_gate cuda", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    gpu::launch_kernel(&head_gate_forward_kernel<scalar_t, acc_t>, shape.grid, shape.block, 0, launch, p,
                       wq.data_ptr<scalar_t>(), ua.data_ptr<scalar_t>(), uc.data_ptr<scalar_t>(),
                       vb.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), gate.data_ptr<scalar_t>());
  });
  return {out, gate};
}

// (grad_pre, grad_value_proj, grad_v_b) of mma_nmt::multihop_gate_backward for checked arguments.
inline std::tuple<at::Tensor, at::Tensor, at::Tensor> run_head_gate_backward(
    const HeadGateParams& p, const at::Tensor& grad_out, const std::optional<at::Tensor>& grad_gate,
    const at::Tensor& query_proj, const at::Tensor& head_proj, const at::Tensor& value_proj, const at::Tensor& v_b,
    const at::Tensor& gate, const gpu::Launch& launch) {
  const at::Tensor dout = grad_out.contiguous(), wq = query_proj.contiguous(), ua = head_proj.contiguous();
  const at::Tensor uc = value_proj.contiguous(), vb = v_b.contiguous(), beta = gate.contiguous();
  const at::Tensor dgate = contiguous_or_undefined(grad_gate);
  at::Tensor dpre = at::empty_like(wq), duc = at::empty_like(uc);
  const at::ScalarType acc_type = at::toOpMathType(vb.scalar_type());
  at::Tensor dv_b_rows = at::empty({p.positions(), p.hop_dim}, vb.options().dtype(acc_type));  // (B * T, Db)
  if (p.positions() > 0) {
    const gpu::WarpGrid shape = position_grid(p, launch);
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, wq.scalar_type(), "mma_nmt::multihop_gate_backward cuda",
                                    [&] {
      using acc_t = at::opmath_type<scalar_t>;
      gpu::launch_kernel(&head_gate_backward_kernel<scalar_t, acc_t>, shape.grid, shape.block, 0, launch, p,
                         dout.data_ptr<scalar_t>(), dgate.defined() ? dgate.data_ptr<scalar_t>() : nullptr,
                         wq.data_ptr<scalar_t>(), ua.data_ptr<scalar_t>(), uc.data_ptr<scalar_t>(),
                         vb.data_ptr<scalar_t>(), beta.data_ptr<scalar_t>(), dpre.data_ptr<scalar_t>(),
                         duc.data_ptr<scalar_t>(), dv_b_rows.data_ptr<acc_t>());
    });
  }
  return {dpre, duc, dv_b_rows.sum(0).to(vb.scalar_type())};  // (B * T, Db) -> (Db,); zeros without positions
}

}  // namespace mma_nmt::multihop::cuda
