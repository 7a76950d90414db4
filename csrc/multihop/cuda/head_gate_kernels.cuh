// CUDA kernels of mma_nmt::multihop_gate and its backward, and their launches for checked arguments. One warp per
// position (sentence, t): lanes split the hidden units (Db) and the value dimensions (Dc), so every load and store of
// a head's row is coalesced, and each head's score (forward) or dL/dbeta (backward) is a warp sum. The softmax over
// the H heads runs on every lane with the arithmetic of multihop/head_gate.h. Backward writes each position's share
// of grad_v_b to its own row, summed afterwards (no atomics: the same result on every run). Accumulates in float
// (double for double); float32, float16, bfloat16 and float64 inputs. The (B, H, T, dim) tensors are read and written
// through their strides (common/head_rows.h), as the CPU kernel does: the projections as they come, out position-major,
// each gradient laid out like its input; gate and grad_gate (B, H, T) contiguous.
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

#include "common/head_layout.h"
#include "common/head_rows.h"
#include "common/warp.cuh"
#include "multihop/head_gate.h"
#include "multihop/multihop_params.h"

namespace mma_nmt::multihop::cuda {

using gpu::kWarpSize;

template <typename scalar_t>
struct HeadGateForwardPointers {
  gpu::HeadRows<const scalar_t> wq, ua;  // (B, H, T, Db)
  gpu::HeadRows<const scalar_t> uc;      // (B, H, T, Dc)
  const scalar_t* v_b;                   // (Db,)
  gpu::HeadRows<scalar_t> out;           // (B, H, T, Dc)
  scalar_t* gate;                        // (B, H, T) contiguous
  gpu::HeadRows<scalar_t> hidden;        // (B, H, T, Db) tanh(wq + ua), written where data is set (the second hop)
};

template <typename scalar_t, typename acc_t>
__global__ void head_gate_forward_kernel(HeadGateParams p, const HeadGateForwardPointers<scalar_t> t) {
  const int64_t n = gpu::warp_index();
  if (n >= p.batch * p.query_len) return;  // the spare warps of the last block, whole warps
  const int64_t b = n / p.query_len, i = n % p.query_len;
  const int lane = threadIdx.x % kWarpSize;
  acc_t beta[kMaxHeads];
  for (int64_t h = 0; h < p.heads; ++h) {
    scalar_t* hidden = t.hidden.data != nullptr ? t.hidden.row(b, h, i) : nullptr;
    beta[h] = gpu::warp_sum(head_score_part<scalar_t, acc_t>(t.wq.row(b, h, i), t.ua.row(b, h, i), t.v_b, p.hop_dim,
                                                             lane, kWarpSize, hidden));
  }
  softmax_over_heads(beta, p.heads);
  for (int64_t h = 0; h < p.heads; ++h) {
    if (lane == 0) t.gate[head_row(n, h, p.heads, p.query_len)] = static_cast<scalar_t>(beta[h]);
    const scalar_t* uc = t.uc.row(b, h, i);
    scalar_t* out = t.out.row(b, h, i);
    for (int64_t c = lane; c < p.value_dim; c += kWarpSize) {
      out[c] = static_cast<scalar_t>(beta[h] * static_cast<acc_t>(uc[c]));
    }
  }
}

template <typename scalar_t, typename acc_t>
struct HeadGateBackwardPointers {
  gpu::HeadRows<const scalar_t> dout;  // (B, H, T, Dc)
  const scalar_t* dgate;               // (B, H, T) contiguous, or nullptr
  gpu::HeadRows<const scalar_t> wq, ua;  // (B, H, T, Db); not read where hidden is given
  gpu::HeadRows<const scalar_t> hidden;  // (B, H, T, Db) tanh(wq + ua) as the forward wrote it, or data nullptr
  gpu::HeadRows<const scalar_t> uc;      // (B, H, T, Dc)
  const scalar_t* v_b;                   // (Db,)
  const scalar_t* gate;                  // (B, H, T) contiguous
  gpu::HeadRows<scalar_t> dpre;          // (B, H, T, Db)
  gpu::HeadRows<scalar_t> duc;           // (B, H, T, Dc)
  acc_t* dv_b_rows;                      // (B * T, Db)
};

// dv_b_rows (B * T, Db): position n's share sum_h de_h tanh(pre_h), summed over the positions by the launcher.
template <typename scalar_t, typename acc_t>
__global__ void head_gate_backward_kernel(HeadGateParams p, const HeadGateBackwardPointers<scalar_t, acc_t> t) {
  const int64_t n = gpu::warp_index();
  if (n >= p.batch * p.query_len) return;  // the spare warps of the last block, whole warps
  const int64_t b = n / p.query_len, i = n % p.query_len;
  const int lane = threadIdx.x % kWarpSize;
  acc_t beta[kMaxHeads], de[kMaxHeads];
  for (int64_t h = 0; h < p.heads; ++h) {
    const int64_t row = head_row(n, h, p.heads, p.query_len);
    beta[h] = static_cast<acc_t>(t.gate[row]);
    const scalar_t *dout = t.dout.row(b, h, i), *uc = t.uc.row(b, h, i);
    scalar_t* duc = t.duc.row(b, h, i);
    acc_t part = 0;  // this lane's share of dL/dbeta_h = dgate + dout . uc
    for (int64_t c = lane; c < p.value_dim; c += kWarpSize) {
      const acc_t d = static_cast<acc_t>(dout[c]);
      part += d * static_cast<acc_t>(uc[c]);
      duc[c] = static_cast<scalar_t>(beta[h] * d);
    }
    de[h] = gpu::warp_sum(part) + (t.dgate != nullptr ? static_cast<acc_t>(t.dgate[row]) : acc_t(0));
  }
  softmax_over_heads_backward(beta, de, p.heads);
  acc_t* dv_b_row = t.dv_b_rows + n * p.hop_dim;
  for (int64_t d = lane; d < p.hop_dim; d += kWarpSize) {
    const acc_t v = static_cast<acc_t>(t.v_b[d]);
    acc_t share = 0;
    for (int64_t h = 0; h < p.heads; ++h) {
      const acc_t u = t.hidden.data != nullptr
                          ? static_cast<acc_t>(t.hidden.row(b, h, i)[d])
                          : tanh_of(static_cast<acc_t>(t.wq.row(b, h, i)[d]) + static_cast<acc_t>(t.ua.row(b, h, i)[d]));
      t.dpre.row(b, h, i)[d] = static_cast<scalar_t>(de[h] * v * (acc_t(1) - u * u));
      share += de[h] * u;
    }
    dv_b_row[d] = share;
  }
}

// One warp per position, in blocks of launch.warps_per_block.
inline gpu::WarpGrid position_grid(const HeadGateParams& p, const gpu::Launch& launch) {
  return gpu::warp_grid(p.positions(), launch, "multihop_gate");
}

// (out, gate) of mma_nmt::multihop_gate for checked arguments. A defined `hidden` ((B, H, T, Db), rows contiguous)
// also receives tanh(query_proj + head_proj): the second hop's saved hidden layer (second_hop_launch.cuh).
inline std::tuple<at::Tensor, at::Tensor> run_head_gate_forward(const HeadGateParams& p, const at::Tensor& query_proj,
                                                                const at::Tensor& head_proj,
                                                                const at::Tensor& value_proj, const at::Tensor& v_b,
                                                                const gpu::Launch& launch,
                                                                const at::Tensor& hidden = {}) {
  const at::Tensor wq = rows_contiguous(query_proj), ua = rows_contiguous(head_proj);
  const at::Tensor uc = rows_contiguous(value_proj), vb = v_b.contiguous();
  at::Tensor out = position_major(p.batch, p.heads, p.query_len, p.value_dim, query_proj.options());
  at::Tensor gate = at::empty({p.batch, p.heads, p.query_len}, query_proj.options());
  if (p.positions() == 0) return {out, gate};
  const gpu::WarpGrid shape = position_grid(p, launch);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, wq.scalar_type(), "mma_nmt::multihop_gate cuda", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const HeadGateForwardPointers<scalar_t> ptrs{
        gpu::head_rows<const scalar_t>(wq), gpu::head_rows<const scalar_t>(ua), gpu::head_rows<const scalar_t>(uc),
        vb.data_ptr<scalar_t>(), gpu::head_rows<scalar_t>(out), gate.data_ptr<scalar_t>(),
        gpu::head_rows_or_none<scalar_t>(hidden)};
    gpu::launch_kernel(&head_gate_forward_kernel<scalar_t, acc_t>, shape.grid, shape.block, 0, launch, p, ptrs);
  });
  return {out, gate};
}

// (grad_pre, grad_value_proj, grad_v_b) of mma_nmt::multihop_gate_backward for checked arguments. Where `hidden`
// (tanh(query_proj + head_proj), as run_head_gate_forward wrote it) is defined, it is read instead, and query_proj
// and head_proj may be undefined.
inline std::tuple<at::Tensor, at::Tensor, at::Tensor> run_head_gate_backward(
    const HeadGateParams& p, const at::Tensor& grad_out, const std::optional<at::Tensor>& grad_gate,
    const at::Tensor& query_proj, const at::Tensor& head_proj, const at::Tensor& value_proj, const at::Tensor& v_b,
    const at::Tensor& gate, const gpu::Launch& launch, const at::Tensor& hidden = {}) {
  const bool reads_hidden = hidden.defined();
  const at::Tensor dout = rows_contiguous(grad_out), uc = rows_contiguous(value_proj);
  const at::Tensor wq = reads_hidden ? at::Tensor() : rows_contiguous(query_proj);
  const at::Tensor ua = reads_hidden ? at::Tensor() : rows_contiguous(head_proj);
  const at::Tensor tanh_rows = reads_hidden ? rows_contiguous(hidden) : at::Tensor();
  const at::Tensor vb = v_b.contiguous(), beta = gate.contiguous(), dgate = contiguous_or_undefined(grad_gate);
  // grad_pre is also head_proj's gradient: laid out like query_proj, as on the CPU (like hidden where it is read)
  at::Tensor dpre = gradient_like(reads_hidden ? hidden : query_proj), duc = gradient_like(value_proj);
  const at::ScalarType acc_type = at::toOpMathType(vb.scalar_type());
  at::Tensor dv_b_rows = at::empty({p.positions(), p.hop_dim}, vb.options().dtype(acc_type));  // (B * T, Db)
  if (p.positions() > 0) {
    const gpu::WarpGrid shape = position_grid(p, launch);
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, uc.scalar_type(), "mma_nmt::multihop_gate_backward cuda",
                                    [&] {
      using acc_t = at::opmath_type<scalar_t>;
      const HeadGateBackwardPointers<scalar_t, acc_t> ptrs{
          gpu::head_rows<const scalar_t>(dout), dgate.defined() ? dgate.data_ptr<scalar_t>() : nullptr,
          gpu::head_rows_or_none<const scalar_t>(wq), gpu::head_rows_or_none<const scalar_t>(ua),
          gpu::head_rows_or_none<const scalar_t>(tanh_rows), gpu::head_rows<const scalar_t>(uc),
          vb.data_ptr<scalar_t>(),              beta.data_ptr<scalar_t>(),
          gpu::head_rows<scalar_t>(dpre),       gpu::head_rows<scalar_t>(duc),
          dv_b_rows.data_ptr<acc_t>()};
      gpu::launch_kernel(&head_gate_backward_kernel<scalar_t, acc_t>, shape.grid, shape.block, 0, launch, p, ptrs);
    });
  }
  return {dpre, duc, dv_b_rows.sum(0).to(vb.scalar_type())};  // (B * T, Db) -> (Db,); zeros without positions
}

}  // namespace mma_nmt::multihop::cuda
