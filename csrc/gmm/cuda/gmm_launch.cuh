// Output allocation and kernel launches of the CUDA GMM cross-attention for checked arguments (gmm_cuda.cu checks
// them): device-agnostic host code, run by the CUDA operator on the current stream and by tests/cpp/emulated on CPU
// tensors under the HIP CPU emulator.
#pragma once

#include "gmm/cuda/gmm_kernels.cuh"  // first: it includes common/cuda_compat.h

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>

#include <optional>

#include "gmm/gmm_outputs.h"

namespace mma_nmt::gmm::cuda {

// Data of an optional tensor, or null when it is absent (undefined or the (0,) placeholder).
template <typename T>
T* ptr_or_null(const at::Tensor& t) {
  return t.defined() && t.numel() > 0 ? t.data_ptr<T>() : nullptr;
}

// Inputs of one call as the kernels read them: q, k, v and dout with contiguous rows (head views as they are), the
// others contiguous; optional ones are undefined when absent, dout only in backward.
struct Inputs {
  at::Tensor q, k, v, lengths, omega, mu, sigma, gate, center, width, dout;
};

inline Inputs kernel_inputs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const std::optional<at::Tensor>& lengths, const at::Tensor& omega, const at::Tensor& mu,
                            const at::Tensor& sigma, const at::Tensor& gate, const LocalBias& local) {
  return {rows_contiguous(q), rows_contiguous(k), rows_contiguous(v), contiguous_or_undefined(lengths),
          omega.contiguous(), mu.contiguous(), sigma.contiguous(), gate.contiguous(),
          contiguous_or_undefined(local.center),  contiguous_or_undefined(local.width), at::Tensor()};
}

template <typename scalar_t, typename acc_t>
GmmArgs<scalar_t, acc_t> make_args(const GmmParams& p, const Inputs& in) {
  const at::ScalarType narrow = in.q.scalar_type();
  const auto mixture = [&](const at::Tensor& t) { return mixture_in<scalar_t, acc_t>(t, narrow); };
  return {gpu::head_rows<const scalar_t>(in.q), gpu::head_rows<const scalar_t>(in.k),
          gpu::head_rows<const scalar_t>(in.v), gpu::head_rows_or_none<const scalar_t>(in.dout),
          mixture(in.omega), mixture(in.mu), mixture(in.sigma), mixture(in.gate), mixture(in.center),
          mixture(in.width),
          in.lengths.defined() ? in.lengths.data_ptr<int64_t>() : nullptr,
          p.batch, p.heads, p.query_len, p.key_len, p.head_dim, p.value_dim, p.components, p.normalization,
          static_cast<acc_t>(p.scale), static_cast<acc_t>(p.sigma_floor)};
}

// Whether the (B, H) heads of a (B, H, len, dim) tensor fold into one batch dimension, (B H, len, dim), as a view:
// true of contiguous heads, false of head views of projections and of their position-major gradients.
inline bool heads_fold(const at::Tensor& x) {
  return x.size(0) <= 1 || x.size(1) <= 1 || x.stride(0) == x.size(1) * x.stride(1);
}

// grad (B, H, S, dim) = pair^T @ rows for each (sentence, head), where pair is (B H, T, S) and rows (B H, T, dim):
// one batched GEMM over the B H heads, written in place where grad's heads fold, else into a buffer copied into grad.
inline void key_gradient_product(at::Tensor& grad, const at::Tensor& pair, const at::Tensor& rows) {
  const int64_t heads = rows.size(0), S = grad.size(2), dim = rows.size(2);
  const at::Tensor pair_t = pair.transpose(1, 2);  // (B H, S, T)
  if (heads_fold(grad)) {
    at::Tensor out = grad.view({heads, S, dim});
    at::bmm_out(out, pair_t, rows);
    return;
  }
  grad.copy_(at::bmm(pair_t, rows).view(grad.sizes()));
}

// (B H, len, dim) rows of `x` for key_gradient_product: a view where its heads fold, else `copied` (the rows the block
// kernel copied there as it read them, so no gather runs).
inline at::Tensor folded_rows(const at::Tensor& x, const at::Tensor& copied) {
  return heads_fold(x) ? x.reshape({x.size(0) * x.size(1), x.size(2), x.size(3)}) : copied;
}

// One warp per row (or key): `warps` of them in blocks of launch.warps_per_block.
using gpu::WarpGrid;

inline WarpGrid warp_grid(int64_t warps, const gpu::Launch& launch) { return gpu::warp_grid(warps, launch, "GMM"); }

// Which kernels run a call: the block-per-head kernels (gmm_block_kernels.cuh) where a head's keys and values fit in
// shared memory, else the one-warp-per-row kernels; the emulated tests force each.
enum class GmmKernels { kAuto, kRowWarps, kHeadBlocks };

// Whether the block-per-head kernels serve this call, by `choice`; refuses kHeadBlocks where they cannot.
template <typename scalar_t, typename acc_t>
bool use_head_blocks(const GmmParams& p, const gpu::Launch& launch, bool backward, GmmKernels choice) {
  const BlockLayout<scalar_t, acc_t> layout(p.key_len, p.head_dim, p.value_dim, p.components, backward);
  const int64_t bytes = layout.bytes(launch.warps_per_block);
  const bool fits = bytes <= launch.shared_limit && p.components <= kWarp;
  TORCH_CHECK(choice != GmmKernels::kHeadBlocks || fits, "mma_nmt GMM: the block-per-head kernels need ", bytes,
              " bytes of shared memory for key_len ", p.key_len, " (at most ", launch.shared_limit, ") and at most ",
              kWarp, " components");
  return choice == GmmKernels::kHeadBlocks || (choice == GmmKernels::kAuto && fits);
}

// Whether the block-per-head kernels take a call in `dtype` (one direction) without a forced choice: GMM's size rule.
// Beyond it the one-warp-per-row kernels run, which the H200 measured behind the composition (bfloat16, B 128, T = S
// = 64: 8.16 against 4.44 ms forward+backward, 2026-11-28), so calls of every dtype take the composition there
// (gmm_cuda.cu, gmm_composition_wanted; float32 and float64 only until 2026-12-03).
inline bool head_blocks_fit(const GmmParams& p, at::ScalarType dtype, bool backward, const gpu::Launch& launch) {
  bool fits = false;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, dtype, "mma_nmt::gmm_attention head blocks", [&] {
    fits = use_head_blocks<scalar_t, at::opmath_type<scalar_t>>(p, launch, backward, GmmKernels::kAuto);
  });
  return fits;
}

// Blocks of launch.warps_per_block warps, one column of blocks per (sentence, head), each block taking
// kBlockRowsPerWarp rows per warp.
inline WarpGrid head_block_grid(const GmmParams& p, const gpu::Launch& launch) {
  const dim3 block = gpu::warp_block(launch, "GMM");
  const int64_t rows_per_block = static_cast<int64_t>(kBlockRowsPerWarp) * launch.warps_per_block;
  return {dim3(static_cast<unsigned>(p.batch * p.heads),
               static_cast<unsigned>((p.query_len + rows_per_block - 1) / rows_per_block)),
          block};
}

// The outputs of mma_nmt::gmm_attention (GmmForwardResult order).
inline GmmForwardResult run_gmm_forward(const GmmParams& p, const Inputs& in, bool return_weights,
                                        const gpu::Launch& launch, GmmKernels kernels = GmmKernels::kAuto) {
  ForwardOutputs o = allocate_forward_outputs(p, in.q, return_weights);
  // As on the CPU: only no query row or no key means nothing to compute (a zero head or value dim still has weights).
  if (p.batch * p.heads * p.query_len == 0 || p.key_len == 0) return empty_forward(o);
  const WarpGrid shape = warp_grid(p.batch * p.heads * p.query_len, launch);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, in.q.scalar_type(), "mma_nmt::gmm_attention cuda", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const GmmOutputs<scalar_t, acc_t> out{
        gpu::head_rows<scalar_t>(o.out),      return_weights ? o.alpha.data_ptr<scalar_t>() : nullptr,
        return_weights ? o.beta.data_ptr<scalar_t>() : nullptr, o.lse.data_ptr<acc_t>(),
        o.log_mass.data_ptr<acc_t>(),         o.alpha_context.data_ptr<acc_t>(),
        o.beta_context.data_ptr<acc_t>()};
    if (use_head_blocks<scalar_t, acc_t>(p, launch, false, kernels)) {
      const WarpGrid blocks = head_block_grid(p, launch);
      const BlockLayout<scalar_t, acc_t> layout(p.key_len, p.head_dim, p.value_dim, p.components, false);
      gpu::launch_kernel(&gmm_forward_block_kernel<scalar_t, acc_t>, blocks.grid, blocks.block,
                         layout.bytes(launch.warps_per_block), launch, make_args<scalar_t, acc_t>(p, in), out);
      return;
    }
    gpu::launch_kernel(&gmm_forward_kernel<scalar_t, acc_t>, shape.grid, shape.block, 0, launch,
                       make_args<scalar_t, acc_t>(p, in), out);
  });
  return o.as_tuple();
}

// The forward's saved statistics a backward receives.
struct SavedStatistics {
  at::Tensor lse, log_mass, alpha_context, beta_context;
};

// The gradients of mma_nmt::gmm_attention_backward (GmmBackwardResult order); `in.dout` holds grad_out.
inline GmmBackwardResult run_gmm_backward(const GmmParams& p, const Inputs& in, const SavedStatistics& saved,
                                          const gpu::Launch& launch, GmmKernels kernels = GmmKernels::kAuto) {
  const bool run = p.batch * p.heads * p.query_len > 0 && p.key_len > 0;  // as on the CPU
  BackwardGrads g = allocate_backward_grads(p, in.q, in.k, in.v, in.omega.scalar_type(), run);
  if (!run) return g.as_tuple();
  const at::Tensor lse = saved.lse.contiguous(), log_mass = saved.log_mass.contiguous();
  const at::Tensor ctx_a = saved.alpha_context.contiguous(), ctx_b = saved.beta_context.contiguous();
  const WarpGrid rows = warp_grid(p.batch * p.heads * p.query_len, launch);
  const WarpGrid keys = warp_grid(p.batch * p.heads * p.key_len, launch);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, in.q.scalar_type(), "mma_nmt::gmm_attention_backward cuda",
                                  [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const bool head_blocks = use_head_blocks<scalar_t, acc_t>(p, launch, true, kernels);
    // The row kernel leaves per-row statistics for the key kernel; the block kernel needs none.
    const at::Tensor row_stats =
        head_blocks ? at::Tensor() : at::empty({p.batch, p.heads, p.query_len, kRowStats}, lse.options());
    acc_t* stats = head_blocks ? nullptr : row_stats.data_ptr<acc_t>();
    const auto mixture = [&](const at::Tensor& t) { return mixture_out<scalar_t, acc_t>(t, in.q.scalar_type()); };
    const GmmGrads<scalar_t, acc_t> grads{
        lse.data_ptr<acc_t>(),         log_mass.data_ptr<acc_t>(),    ctx_a.data_ptr<acc_t>(),
        ctx_b.data_ptr<acc_t>(),       stats,                         gpu::head_rows<scalar_t>(g.q),
        gpu::head_rows<scalar_t>(g.k), gpu::head_rows<scalar_t>(g.v), mixture(g.omega),
        mixture(g.mu),                 mixture(g.sigma),              mixture(g.gate),
        mixture(g.local_center),       mixture(g.local_width)};
    const GmmArgs<scalar_t, acc_t> args = make_args<scalar_t, acc_t>(p, in);
    if (head_blocks) {
      // One kernel, then dk = ds^T q and dv = gamma^T dout as two batched GEMMs over the (B H) heads: 3 launches,
      // and a copy of each gradient where k and v are head views (their gradients' heads do not fold).
      const at::Tensor ds = at::empty({p.batch * p.heads, p.query_len, p.key_len}, in.q.options());
      const at::Tensor gamma = at::empty_like(ds);
      // Where q or grad_out is a head view, the kernel leaves its rows contiguous for the GEMMs.
      const auto rows_buffer = [&](const at::Tensor& x) {
        return heads_fold(x) ? at::Tensor() : at::empty({p.batch * p.heads, p.query_len, x.size(3)}, x.options());
      };
      const at::Tensor q_rows = rows_buffer(in.q), dout_rows = rows_buffer(in.dout);
      const WarpGrid blocks = head_block_grid(p, launch);
      const BlockLayout<scalar_t, acc_t> layout(p.key_len, p.head_dim, p.value_dim, p.components, true);
      gpu::launch_kernel(&gmm_backward_block_kernel<scalar_t, acc_t>, blocks.grid, blocks.block,
                         layout.bytes(launch.warps_per_block), launch, args, grads,
                         PairGrads<scalar_t>{ds.data_ptr<scalar_t>(), gamma.data_ptr<scalar_t>(),
                                             ptr_or_null<scalar_t>(q_rows), ptr_or_null<scalar_t>(dout_rows)});
      key_gradient_product(g.k, ds, folded_rows(in.q, q_rows));           // (B, H, S, D)
      key_gradient_product(g.v, gamma, folded_rows(in.dout, dout_rows));  // (B, H, S, Dv)
      return;
    }
    // The key kernel reads the row statistics the row kernel leaves: launched in this order on one stream.
    gpu::launch_kernel(&gmm_backward_rows_kernel<scalar_t, acc_t>, rows.grid, rows.block, 0, launch, args, grads);
    gpu::launch_kernel(&gmm_backward_keys_kernel<scalar_t, acc_t>, keys.grid, keys.block, 0, launch, args, grads);
  });
  return g.as_tuple();
}

}  // namespace mma_nmt::gmm::cuda
