// CUDA implementation of mma_nmt::gmm_attention and mma_nmt::gmm_attention_backward (float32, float16, bfloat16 and
// float64; accumulation in float, or double for float64): argument checks, allocation and launches of the kernels in
// gmm_kernels.cuh.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "gmm/cuda/gmm_kernels.cuh"
#include "gmm/gmm_outputs.h"

namespace mma_nmt::gmm::cuda {
namespace {

// Data of an optional tensor, or null when it is absent (undefined or the (0,) placeholder).
template <typename T>
T* ptr_or_null(const at::Tensor& t) {
  return t.defined() && t.numel() > 0 ? t.data_ptr<T>() : nullptr;
}

// Contiguous inputs of one call; optional ones are undefined when absent.
struct Inputs {
  at::Tensor q, k, v, lengths, omega, mu, sigma, gate, center, width, dout;
};

Inputs contiguous_inputs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         const std::optional<at::Tensor>& lengths, const at::Tensor& omega, const at::Tensor& mu,
                         const at::Tensor& sigma, const at::Tensor& gate, const std::optional<at::Tensor>& center,
                         const std::optional<at::Tensor>& width) {
  auto opt = [](const std::optional<at::Tensor>& t) { return t.has_value() ? t->contiguous() : at::Tensor(); };
  return {q.contiguous(), k.contiguous(), v.contiguous(), opt(lengths), omega.contiguous(), mu.contiguous(),
          sigma.contiguous(), gate.contiguous(), opt(center), opt(width), at::Tensor()};
}

template <typename scalar_t, typename acc_t>
GmmArgs<scalar_t, acc_t> make_args(const GmmParams& p, const Inputs& in) {
  return {in.q.data_ptr<scalar_t>(), in.k.data_ptr<scalar_t>(), in.v.data_ptr<scalar_t>(),
          in.omega.data_ptr<scalar_t>(), in.mu.data_ptr<scalar_t>(), in.sigma.data_ptr<scalar_t>(),
          in.gate.data_ptr<scalar_t>(), ptr_or_null<scalar_t>(in.center), ptr_or_null<scalar_t>(in.width),
          ptr_or_null<scalar_t>(in.dout), in.lengths.defined() ? in.lengths.data_ptr<int64_t>() : nullptr,
          p.batch, p.heads, p.query_len, p.key_len, p.head_dim, p.value_dim, p.components, p.normalization,
          static_cast<acc_t>(p.scale), static_cast<acc_t>(p.sigma_floor)};
}

void check_cuda_limits(const char* op, const GmmParams& p, const at::Tensor& q) {
  TORCH_CHECK_VALUE(q.is_cuda(), op, ": the CUDA kernel got q on ", q.device());
  TORCH_CHECK_VALUE(p.head_dim <= kWarp * kMaxPerLane && p.value_dim <= kWarp * kMaxPerLane, op,
                    ": the CUDA kernel supports head_dim and value_dim up to ", kWarp * kMaxPerLane, ", got ",
                    p.head_dim, " and ", p.value_dim);
  TORCH_CHECK_VALUE(p.components <= kMaxComponents, op, ": the CUDA kernel supports up to ", kMaxComponents,
                    " components, got ", p.components);
}

unsigned int blocks_for(int64_t warps) {
  return static_cast<unsigned int>((warps + kWarpsPerBlock - 1) / kWarpsPerBlock);
}

GmmForwardResult gmm_attention_cuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                    const std::optional<at::Tensor>& key_lengths, const at::Tensor& omega,
                                    const at::Tensor& mu, const at::Tensor& sigma, const at::Tensor& gate,
                                    const std::optional<at::Tensor>& local_center,
                                    const std::optional<at::Tensor>& local_width, double scale, int64_t normalization,
                                    double sigma_floor, bool return_weights) {
  const char* op = "mma_nmt.gmm_attention";
  const GmmParams p = check_gmm_args(op, q, k, v, key_lengths, omega, mu, sigma, gate, {local_center, local_width},
                                     scale, normalization, sigma_floor);
  check_cuda_limits(op, p, q);
  const c10::cuda::CUDAGuard guard(q.device());
  ForwardOutputs o = allocate_forward_outputs(p, q, return_weights);
  // As on the CPU: only no query row or no key means nothing to compute (a zero head or value dim still has weights).
  if (p.batch * p.heads * p.query_len == 0 || p.key_len == 0) return empty_forward(o);
  const Inputs in = contiguous_inputs(q, k, v, key_lengths, omega, mu, sigma, gate, local_center, local_width);
  const int64_t rows = p.batch * p.heads * p.query_len;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, q.scalar_type(), "mma_nmt::gmm_attention cuda", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    GmmOutputs<scalar_t, acc_t> out{o.out.data_ptr<scalar_t>(), return_weights ? o.alpha.data_ptr<scalar_t>() : nullptr,
                                    return_weights ? o.beta.data_ptr<scalar_t>() : nullptr, o.lse.data_ptr<acc_t>(),
                                    o.log_mass.data_ptr<acc_t>(), o.alpha_context.data_ptr<acc_t>(),
                                    o.beta_context.data_ptr<acc_t>()};
    gmm_forward_kernel<scalar_t, acc_t><<<blocks_for(rows), kWarpsPerBlock * kWarp, 0,
                                          at::cuda::getCurrentCUDAStream()>>>(make_args<scalar_t, acc_t>(p, in), out);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return o.as_tuple();
}

template <typename scalar_t, typename acc_t>
void launch_backward(const GmmParams& p, const Inputs& in, const at::Tensor& lse, const at::Tensor& log_mass,
                     const at::Tensor& ctx_a, const at::Tensor& ctx_b, BackwardGrads& g) {
  const at::Tensor row_stats = at::empty({p.batch, p.heads, p.query_len, kRowStats}, lse.options());
  GmmGrads<scalar_t, acc_t> gr{lse.data_ptr<acc_t>(), log_mass.data_ptr<acc_t>(), ctx_a.data_ptr<acc_t>(),
                               ctx_b.data_ptr<acc_t>(), row_stats.data_ptr<acc_t>(), g.q.data_ptr<scalar_t>(),
                               g.k.data_ptr<scalar_t>(), g.v.data_ptr<scalar_t>(), g.omega.data_ptr<scalar_t>(),
                               g.mu.data_ptr<scalar_t>(), g.sigma.data_ptr<scalar_t>(), g.gate.data_ptr<scalar_t>(),
                               ptr_or_null<scalar_t>(g.local_center),
                               ptr_or_null<scalar_t>(g.local_width)};
  const GmmArgs<scalar_t, acc_t> args = make_args<scalar_t, acc_t>(p, in);
  const auto stream = at::cuda::getCurrentCUDAStream();
  const int threads = kWarpsPerBlock * kWarp;
  gmm_backward_rows_kernel<scalar_t, acc_t><<<blocks_for(p.batch * p.heads * p.query_len), threads, 0, stream>>>(
      args, gr);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  gmm_backward_keys_kernel<scalar_t, acc_t><<<blocks_for(p.batch * p.heads * p.key_len), threads, 0, stream>>>(
      args, gr);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

GmmBackwardResult gmm_attention_backward_cuda(
    const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const std::optional<at::Tensor>& key_lengths, const at::Tensor& omega, const at::Tensor& mu,
    const at::Tensor& sigma, const at::Tensor& gate, const std::optional<at::Tensor>& local_center,
    const std::optional<at::Tensor>& local_width, const at::Tensor& lse, const at::Tensor& log_mass,
    const at::Tensor& alpha_context, const at::Tensor& beta_context, double scale, int64_t normalization,
    double sigma_floor) {
  const char* op = "mma_nmt.gmm_attention_backward";
  const GmmParams p = check_gmm_args(op, q, k, v, key_lengths, omega, mu, sigma, gate, {local_center, local_width},
                                     scale, normalization, sigma_floor);
  check_cuda_limits(op, p, q);
  check_gmm_backward_extras(op, p, q, grad_out, lse, log_mass, alpha_context, beta_context);
  const c10::cuda::CUDAGuard guard(q.device());
  const bool run = p.batch * p.heads * p.query_len > 0 && p.key_len > 0;  // as on the CPU
  BackwardGrads g = allocate_backward_grads(p, q, run);
  if (!run) return g.as_tuple();
  Inputs in = contiguous_inputs(q, k, v, key_lengths, omega, mu, sigma, gate, local_center, local_width);
  in.dout = grad_out.contiguous();
  const at::Tensor lse_c = lse.contiguous(), mass_c = log_mass.contiguous();
  const at::Tensor ctx_a = alpha_context.contiguous(), ctx_b = beta_context.contiguous();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, q.scalar_type(), "mma_nmt::gmm_attention_backward cuda",
                                  [&] {
                                    using acc_t = at::opmath_type<scalar_t>;
                                    launch_backward<scalar_t, acc_t>(p, in, lse_c, mass_c, ctx_a, ctx_b, g);
                                  });
  return g.as_tuple();
}

}  // namespace

TORCH_LIBRARY_IMPL(mma_nmt, CUDA, m) {
  m.impl("gmm_attention", &gmm_attention_cuda);
  m.impl("gmm_attention_backward", &gmm_attention_backward_cuda);
}

}  // namespace mma_nmt::gmm::cuda
