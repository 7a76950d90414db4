// Backward pass of mma_nmt::attention on CUDA: one warp per query row recomputes the row's probabilities from the saved
// log-sum-exp, keeps dQ of its row in registers and adds its share of dK and dV atomically.
//
// With logits s = scale * q.k, weights P = softmax(s), dropout keep factors z (0 or 1/(1-p)) and O = (P z) V:
//   dV_j += P_ij z_ij dO_i,   dS_ij = P_ij (z_ij dO_i.v_j - delta_i) with delta_i = dO_i.O_i,
//   dQ_i += scale dS_ij k_j,  dK_j += scale dS_ij q_i.
// Several rows share a key, so dK and dV go through accumulators in the accumulation type (cast to the input dtype
// at the end); dQ has one writer per row.
//
// Device source: compiled by nvcc (attention_cuda_backward.cu) and under the HIP CPU emulator (tests/cpp/emulated).
#pragma once

#include "attention/cuda/warp_row.cuh"  // first: it includes common/cuda_compat.h

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>

#include <tuple>
#include <utility>

#include "attention/cuda/attention_tile_kernels.cuh"
#include "common/online_softmax.h"

namespace mma_nmt::attention::cuda {

// dK and dV go to accumulators of the accumulation type (BackwardPointers: attention_tile_kernels.cuh).
template <typename scalar_t>
using RowBackwardPointers = BackwardPointers<scalar_t, at::opmath_type<scalar_t>>;

// dst[d] += factor * slice[e] for this lane's elements d = lane + 32 e.
template <int kPerLane, typename acc_t>
__device__ __forceinline__ void atomic_add_slice(acc_t* dst, int64_t dim, const acc_t (&slice)[kPerLane], acc_t factor) {
  const int lane = threadIdx.x % kWarpSize;
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) {
    const int64_t d = lane + e * kWarpSize;
    if (d < dim) atomicAdd(dst + d, factor * slice[e]);
  }
}

template <typename scalar_t, int kPerLane>
__global__ void __launch_bounds__(kMaxWarpsPerBlock* kWarpSize)
    attention_backward_kernel(const KernelParams p, const RowBackwardPointers<scalar_t> t) {
  using acc_t = at::opmath_type<scalar_t>;
  const RowCoordinates r = locate_row(p);
  if (!r.valid) return;  // the whole warp leaves together
  const acc_t lse = t.lse[r.row];
  const int64_t D = p.head_dim, Dv = p.value_dim;
  acc_t grad_q[kPerLane];
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) grad_q[e] = 0;
  // A fully masked row (lse = -inf) has zero weights: it adds nothing, and its grad_q is 0 (written here: grad_q is
  // not zero-filled before the launch).
  if (lse == negative_infinity<acc_t>() || r.keys.empty()) {
    store_slice<kPerLane>(t.grad_q.row(r.b, r.h, r.i), D, grad_q, acc_t(1));
    return;
  }
  const scalar_t* k = t.k.head(r.b, r.h);
  const scalar_t* v = t.v.head(r.b, r.h);
  acc_t* grad_k = t.grad_k.head(r.b, r.h);
  acc_t* grad_v = t.grad_v.head(r.b, r.h);
  const acc_t scale = static_cast<acc_t>(p.scale);
  const int lane = threadIdx.x % kWarpSize;

  acc_t q[kPerLane], grad_out[kPerLane], out[kPerLane];
  load_slice<kPerLane>(t.q.row(r.b, r.h, r.i), D, q);
  load_slice<kPerLane>(t.grad_out.row(r.b, r.h, r.i), Dv, grad_out);
  load_slice<kPerLane>(t.out.row(r.b, r.h, r.i), Dv, out);
  acc_t delta_part = 0;
#pragma unroll
  for (int e = 0; e < kPerLane; ++e) delta_part += grad_out[e] * out[e];  // zero past Dv, since both slices are
  const acc_t delta = warp_sum(delta_part);  // dO_i . O_i

  for (int64_t j = r.keys.begin; j < r.keys.end; ++j) {
    const scalar_t* key = k + j * t.k.row_stride;
    const acc_t prob = probability_from_lse(warp_dot<kPerLane>(q, key, D) * scale, lse);
    const acc_t grad_prob = warp_dot<kPerLane>(grad_out, v + j * t.v.row_stride, Dv);  // dO_i . v_j
    const acc_t keep = keep_factor<acc_t>(p, r.row, j);
    const acc_t grad_logit = prob * (grad_prob * keep - delta) * scale;  // dS_ij, times the logit scale
#pragma unroll
    for (int e = 0; e < kPerLane; ++e) {
      const int64_t d = lane + e * kWarpSize;
      if (d < D) grad_q[e] += grad_logit * static_cast<acc_t>(key[d]);
    }
    atomic_add_slice<kPerLane>(grad_k + j * t.grad_k.row_stride, D, q, grad_logit);
    atomic_add_slice<kPerLane>(grad_v + j * t.grad_v.row_stride, Dv, grad_out, prob * keep);
  }
  store_slice<kPerLane>(t.grad_q.row(r.b, r.h, r.i), D, grad_q, acc_t(1));
}

template <typename scalar_t, int kPerLane>
void launch_backward(const AttentionParams& p, const BackwardTensors& t, const gpu::Launch& launch) {
  using acc_t = at::opmath_type<scalar_t>;
  const RowBackwardPointers<scalar_t> ptrs = backward_pointers<scalar_t, acc_t>(t);
  gpu::launch_kernel(&attention_backward_kernel<scalar_t, kPerLane>, row_grid(p, launch), row_block(launch), 0, launch,
                     make_kernel_params(p, t.key_lengths), ptrs);
}

// The warp kernel's dK and dV accumulators in the accumulation type, zero-filled by one fill: views of one buffer,
// each laid out as gradient_like lays out its gradient (gradient_strides). In float and double they are the gradients
// themselves (the entry point's as_gradient_layout then copies nothing); else run_attention_backward copies them into
// gradients of the input dtype. Until 2026-12-02 float and double filled dK and dV one at a time (3 launches with the
// kernel).
inline std::pair<at::Tensor, at::Tensor> row_backward_accumulators(const at::Tensor& k, const at::Tensor& v) {
  const at::ScalarType acc_type = at::toOpMathType(k.scalar_type());
  const int64_t k_elements = k.numel();
  const at::Tensor both = at::zeros({k_elements + v.numel()}, k.options().dtype(acc_type));
  return {both.as_strided(k.sizes(), gradient_strides(k), 0),
          both.as_strided(v.sizes(), gradient_strides(v), k_elements)};
}

// (grad_q, grad_k, grad_v) of mma_nmt::attention_backward for checked arguments (attention_cuda.cpp), computed on the
// launch's stream by the two tiled kernels (attention_tile_kernels.cuh) where they serve the call, else by the
// warp-per-row kernel.
inline std::tuple<at::Tensor, at::Tensor, at::Tensor> run_attention_backward(
    const AttentionParams& p, const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k,
    const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse, const std::optional<at::Tensor>& key_lengths,
    const gpu::Launch& launch, AttentionKernelSet kernels = AttentionKernelSet::kAuto) {
  const bool any_work = lse.numel() > 0 && p.key_len > 0;  // as on the CPU: a zero head_dim still has grad_v
  int tile_warps = 0;
  if (any_work) {
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, q.scalar_type(), "mma_nmt::attention cuda backward", [&] {
      tile_warps = tile_warps_for<scalar_t>(p, launch, /*backward=*/true, /*return_probs=*/false, kernels);
    });
  }
  // The inputs read through their strides (rows contiguous); each gradient laid out like its input (gradient_like).
  if (tile_warps > 0) {  // every gradient element is written once, in the input dtype
    const BackwardTensors t{rows_contiguous(grad_out), rows_contiguous(q), rows_contiguous(k), rows_contiguous(v),
                            rows_contiguous(out),      lse.contiguous(),   contiguous_or_undefined(key_lengths),
                            gradient_like(q),          gradient_like(k),   gradient_like(v)};
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, q.scalar_type(), "mma_nmt::attention cuda backward", [&] {
      launch_tile_backward<scalar_t>(p, t, tile_warps, launch);
    });
    return {t.grad_q, t.grad_k_acc, t.grad_v_acc};
  }
  // The warp kernel writes every row of grad_q (0 for a row without keys) and adds into dK and dV: views of one
  // zero-filled buffer in the accumulation type, which are the gradients themselves in float and double, else copied
  // into gradients of the input dtype after the kernel. Several query rows add to a key in an order that changes from
  // run to run, so under torch.use_deterministic_algorithms(True) this path is taken only where the tiles cannot serve
  // the call (tile_warps_for), and says so: an error, or a warning with warn_only=True.
  if (any_work && p.query_len > 1) {
    at::globalContext().alertNotDeterministic(
        "mma_nmt::attention_backward on CUDA with head sizes above 128 or MMA_NMT_CUDA_KERNELS=rows (the warp-per-row "
        "kernel adds dK and dV atomically)");
  }
  const auto [grad_k_acc, grad_v_acc] = row_backward_accumulators(k, v);
  const BackwardTensors t{rows_contiguous(grad_out),
                          rows_contiguous(q),
                          rows_contiguous(k),
                          rows_contiguous(v),
                          rows_contiguous(out),
                          lse.contiguous(),
                          contiguous_or_undefined(key_lengths),
                          any_work ? gradient_like(q) : gradient_like(q).zero_(),
                          grad_k_acc,
                          grad_v_acc};
  if (any_work) {
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, q.scalar_type(), "mma_nmt::attention cuda backward", [&] {
      with_values_per_lane(p, [&](auto per_lane) {
        launch_backward<scalar_t, decltype(per_lane)::value>(p, t, launch);
      });
    });
  }
  if (grad_k_acc.scalar_type() == k.scalar_type()) return {t.grad_q, grad_k_acc, grad_v_acc};
  return {t.grad_q, gradient_like(k).copy_(grad_k_acc), gradient_like(v).copy_(grad_v_acc)};
}

}  // namespace mma_nmt::attention::cuda
