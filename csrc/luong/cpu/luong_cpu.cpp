// CPU implementation of mma_nmt::shared_value_attention and its backward: checks, allocation, and the choice of the
// kernel build that matches the processor.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <limits>
#include <tuple>

#include "common/cpu_isa.h"
#include "luong/cpu/kernel_api.h"

namespace mma_nmt::luong::cpu {
namespace {


std::tuple<at::Tensor, at::Tensor, at::Tensor> shared_value_attention_cpu(const at::Tensor& q, const at::Tensor& k,
                                                                          const at::Tensor& v,
                                                                          const std::optional<at::Tensor>& key_lengths,
                                                                          double scale, bool return_probs) {
  const char* op = "mma_nmt.shared_value_attention";
  const SharedValueParams p = check_shared_value_args(op, q, k, v, key_lengths, scale);
  check_cpu_floating(op, q);
  SharedValueForward t{q.contiguous(), k.contiguous(), v.contiguous(), contiguous_or_undefined(key_lengths),
                       at::empty({p.batch, p.heads, p.query_len, p.value_dim}, q.options()),
                       at::empty({p.batch, p.heads, p.query_len}, q.options()), at::Tensor()};
  if (return_probs) t.probs = at::zeros({p.batch, p.heads, p.query_len, p.key_len}, q.options());
  const at::Tensor probs = return_probs ? t.probs : at::empty({0}, q.options());
  // A zero head or value dim still has weights (and lse): only no query row or no key leaves nothing to compute.
  if (p.batch * p.heads * p.query_len == 0 || p.key_len == 0) {
    t.out.zero_();
    t.lse.fill_(-std::numeric_limits<double>::infinity());
    return {t.out, t.lse, probs};
  }
  MMA_NMT_CPU_DISPATCH(shared_value_forward, p, t);
  return {t.out, t.lse, probs};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> shared_value_attention_backward_cpu(
    const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& out,
    const at::Tensor& lse, const std::optional<at::Tensor>& key_lengths, double scale) {
  const char* op = "mma_nmt.shared_value_attention_backward";
  const SharedValueParams p = check_shared_value_args(op, q, k, v, key_lengths, scale);
  check_shared_value_backward_extras(op, p, q, grad_out, out, lse);
  check_cpu_floating(op, q);
  SharedValueBackward t{grad_out.contiguous(), q.contiguous(), k.contiguous(), v.contiguous(), out.contiguous(),
                        lse.contiguous(), contiguous_or_undefined(key_lengths),
                        at::zeros_like(q, at::MemoryFormat::Contiguous),
                        at::empty_like(k, at::MemoryFormat::Contiguous),
                        at::empty_like(v, at::MemoryFormat::Contiguous)};
  // With head dim 0 the weights are uniform and grad_v is not 0; with value dim 0 the kernel writes zeros.
  if (p.batch * p.heads * p.query_len == 0 || p.key_len == 0) {
    t.grad_k.zero_();
    t.grad_v.zero_();
  } else {
    MMA_NMT_CPU_DISPATCH(shared_value_backward, p, t);
  }
  return {t.grad_q, t.grad_k, t.grad_v};
}

}  // namespace

TORCH_LIBRARY_IMPL(mma_nmt, CPU, m) {
  m.impl("shared_value_attention", &shared_value_attention_cpu);
  m.impl("shared_value_attention_backward", &shared_value_attention_backward_cpu);
}

}  // namespace mma_nmt::luong::cpu
