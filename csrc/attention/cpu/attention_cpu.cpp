// CPU implementation of mma_nmt::attention and mma_nmt::attention_backward: argument checks, output allocation, and the
// choice of the kernel build that matches the processor.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <tuple>

#include "attention/attention_outputs.h"
#include "attention/cpu/kernel_api.h"
#include "common/cpu_isa.h"
#include "common/head_layout.h"

namespace mma_nmt::attention::cpu {
namespace {

std::tuple<at::Tensor, at::Tensor, at::Tensor> attention_cpu(const at::Tensor& q, const at::Tensor& k,
                                                             const at::Tensor& v,
                                                             const std::optional<at::Tensor>& key_lengths,
                                                             at::IntArrayRef head_kinds, int64_t window, double scale,
                                                             int64_t query_offset, double dropout_p, int64_t seed,
                                                             bool return_probs, bool self_attention) {
  // self_attention is checked and has no effect here: the CPU kernel computes every query row (SPEC, shared rules)
  const AttentionParams p = check_attention_args("mma_nmt.attention", q, k, v, key_lengths, head_kinds, window, scale,
                                                 query_offset, dropout_p, seed, self_attention);
  TORCH_CHECK_TYPE(q.scalar_type() == at::kFloat || q.scalar_type() == at::kDouble,
                   "mma_nmt.attention: on the CPU q must be float32 or float64, got ", q.scalar_type());
  ForwardOutputs o = allocate_forward_outputs(p, q, return_probs, OutLayout::kPositionMajor);
  // Nothing to compute without a query row (zero batch, heads or query_len). A zero head_dim or value_dim still leaves
  // weights, lse and (with head_dim 0, where every visible key scores 0) outputs to compute.
  if (o.lse.numel() == 0) return {o.out, o.lse, o.probs};
  ForwardTensors t{rows_contiguous(q), rows_contiguous(k), rows_contiguous(v), contiguous_or_undefined(key_lengths),
                   o.out, o.lse, return_probs ? o.probs : at::Tensor()};
  MMA_NMT_CPU_DISPATCH(attention_forward, p, t);
  return {o.out, o.lse, o.probs};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> attention_backward_cpu(
    const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& out,
    const at::Tensor& lse, const std::optional<at::Tensor>& key_lengths, at::IntArrayRef head_kinds, int64_t window,
    double scale, int64_t query_offset, double dropout_p, int64_t seed, bool self_attention) {
  const char* op = "mma_nmt.attention_backward";
  const AttentionParams p = check_attention_args(op, q, k, v, key_lengths, head_kinds, window, scale, query_offset,
                                                 dropout_p, seed, self_attention);
  TORCH_CHECK_TYPE(q.scalar_type() == at::kFloat || q.scalar_type() == at::kDouble, op,
                   ": on the CPU q must be float32 or float64, got ", q.scalar_type());
  check_backward_extras(op, p, q, grad_out, out, lse, stats_dtype(q.scalar_type()));
  // Without a query row or a key all gradients are zero. A zero head_dim still has grad_v (weights are uniform).
  const bool has_work = lse.numel() > 0 && p.key_len > 0;
  // The kernel writes every element of the three gradients (it zeroes grad_k and grad_v per head before accumulating).
  const auto gradient_of = [has_work](const at::Tensor& x) {
    at::Tensor grad = gradient_like(x);
    return has_work ? grad : grad.zero_();
  };
  BackwardTensors t{rows_contiguous(grad_out), rows_contiguous(q), rows_contiguous(k), rows_contiguous(v),
                    rows_contiguous(out), lse.contiguous(), contiguous_or_undefined(key_lengths),
                    gradient_of(q), gradient_of(k), gradient_of(v)};
  if (has_work) {
    MMA_NMT_CPU_DISPATCH(attention_backward, p, t);
  }
  return {t.grad_q, t.grad_k, t.grad_v};
}

}  // namespace

TORCH_LIBRARY_IMPL(mma_nmt, CPU, m) {
  m.impl("attention", &attention_cpu);
  m.impl("attention_backward", &attention_backward_cpu);
}

}  // namespace mma_nmt::attention::cpu
