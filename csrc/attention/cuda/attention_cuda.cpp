// CUDA implementation of mma_nmt::attention and mma_nmt::attention_backward: argument checks, output allocation and the
// kernel launches on q's device. Plain C++ (no device code), so only the two kernel files go through nvcc.
#include <ATen/ATen.h>
#include <ATen/OpMathType.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <limits>
#include <tuple>

#include "attention/attention_outputs.h"
#include "attention/cuda/attention_cuda.h"

namespace mma_nmt::attention::cuda {
namespace {

// Limits of the warp-per-row kernels, checked before any allocation. key_lengths need no range check here: the kernels
// clamp them (keys_of_sentence), as reading them on the host would synchronise with the device.
void check_cuda_limits(const char* op, const AttentionParams& p, const at::Tensor& q) {
  TORCH_CHECK_VALUE(q.is_cuda(), op, ": expected CUDA tensors, got q on ", q.device());
  TORCH_CHECK_VALUE(p.head_dim <= kMaxHeadDim && p.value_dim <= kMaxHeadDim, op, ": the CUDA kernels support head ",
                    "sizes up to ", kMaxHeadDim, " (one warp holds a row in registers), got head_dim=", p.head_dim,
                    " (q, k) and value_dim=", p.value_dim, " (v)");
  TORCH_CHECK_VALUE(p.heads <= kMaxHeads, op, ": the CUDA kernels support at most ", kMaxHeads, " heads, got ",
                    p.heads);
  TORCH_CHECK_VALUE(p.batch <= 65535, op, ": the CUDA kernels support a batch of at most 65535 (one grid z-index per ",
                    "sentence), got ", p.batch);
}

at::Tensor contiguous_lengths(const std::optional<at::Tensor>& key_lengths) {
  return key_lengths.has_value() ? key_lengths->contiguous() : at::Tensor();
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> attention_cuda(const at::Tensor& q, const at::Tensor& k,
                                                              const at::Tensor& v,
                                                              const std::optional<at::Tensor>& key_lengths,
                                                              at::IntArrayRef head_kinds, int64_t window, double scale,
                                                              int64_t query_offset, double dropout_p, int64_t seed,
                                                              bool return_probs) {
  const char* op = "mma_nmt.attention";
  const AttentionParams p =
      check_attention_args(op, q, k, v, key_lengths, head_kinds, window, scale, query_offset, dropout_p, seed);
  check_cuda_limits(op, p, q);
  const c10::cuda::OptionalCUDAGuard guard(q.device());
  ForwardOutputs o = allocate_forward_outputs(p, q, return_probs);
  // As on the CPU: nothing to compute without a query row; a zero head_dim or value_dim still has weights and lse.
  if (o.lse.numel() == 0) return {o.out, o.lse, o.probs};
  const ForwardTensors t{q.contiguous(), k.contiguous(), v.contiguous(), contiguous_lengths(key_lengths),
                         o.out,          o.lse,          return_probs ? o.probs : at::Tensor()};
  attention_forward(p, t);
  return {o.out, o.lse, o.probs};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> attention_backward_cuda(
    const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& out,
    const at::Tensor& lse, const std::optional<at::Tensor>& key_lengths, at::IntArrayRef head_kinds, int64_t window,
    double scale, int64_t query_offset, double dropout_p, int64_t seed) {
  const char* op = "mma_nmt.attention_backward";
  const AttentionParams p =
      check_attention_args(op, q, k, v, key_lengths, head_kinds, window, scale, query_offset, dropout_p, seed);
  check_backward_extras(op, p, q, grad_out, out, lse, lse_dtype(q.scalar_type()));
  check_cuda_limits(op, p, q);
  const c10::cuda::OptionalCUDAGuard guard(q.device());
  const at::ScalarType acc_type = at::toOpMathType(q.scalar_type());
  const BackwardTensors t{grad_out.contiguous(),
                          q.contiguous(),
                          k.contiguous(),
                          v.contiguous(),
                          out.contiguous(),
                          lse.contiguous(),
                          contiguous_lengths(key_lengths),
                          at::zeros_like(q, at::MemoryFormat::Contiguous),
                          at::zeros(k.sizes(), k.options().dtype(acc_type)),
                          at::zeros(v.sizes(), v.options().dtype(acc_type))};
  if (lse.numel() > 0 && p.key_len > 0) {  // as on the CPU: a zero head_dim still has grad_v
    attention_backward(p, t);
  }
  // A no-op for float and double inputs, whose accumulators already have the input dtype.
  return {t.grad_q, t.grad_k_acc.to(k.scalar_type()), t.grad_v_acc.to(v.scalar_type())};
}

}  // namespace

TORCH_LIBRARY_IMPL(mma_nmt, CUDA, m) {
  m.impl("attention", &attention_cuda);
  m.impl("attention_backward", &attention_backward_cuda);
}

}  // namespace mma_nmt::attention::cuda
