// CPU implementation of mma_nmt::multihop_gate and mma_nmt::multihop_gate_backward: checks, allocation, and the choice
// of the kernel build that matches the processor.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <tuple>

#include "common/cpu_isa.h"
#include "common/head_layout.h"
#include "multihop/cpu/kernel_api.h"

namespace mma_nmt::multihop::cpu {
namespace {

std::tuple<at::Tensor, at::Tensor> multihop_gate_cpu(const at::Tensor& query_proj, const at::Tensor& head_proj,
                                                     const at::Tensor& value_proj, const at::Tensor& v_b) {
  const char* op = "mma_nmt.multihop_gate";
  const HeadGateParams p = check_head_gate_args(op, query_proj, head_proj, value_proj, v_b);
  check_cpu_floating(op, query_proj, "query_proj");
  HeadGateForward t{rows_contiguous(query_proj), rows_contiguous(head_proj), rows_contiguous(value_proj),
                    v_b.contiguous(),
                    position_major(p.batch, p.heads, p.query_len, p.value_dim, query_proj.options()),
                    at::empty({p.batch, p.heads, p.query_len}, query_proj.options())};
  if (p.positions() == 0) return {t.out, t.gate};
  MMA_NMT_CPU_DISPATCH(head_gate_forward, p, t);
  return {t.out, t.gate};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> multihop_gate_backward_cpu(
    const at::Tensor& grad_out, const std::optional<at::Tensor>& grad_gate, const at::Tensor& query_proj,
    const at::Tensor& head_proj, const at::Tensor& value_proj, const at::Tensor& v_b, const at::Tensor& gate) {
  const char* op = "mma_nmt.multihop_gate_backward";
  const HeadGateParams p = check_head_gate_args(op, query_proj, head_proj, value_proj, v_b);
  check_head_gate_backward_extras(op, p, query_proj, grad_out, grad_gate, gate);
  check_cpu_floating(op, query_proj, "query_proj");
  HeadGateBackward t{grad_out,  // any strides: the kernel gathers rows whose last dimension is not contiguous
                     contiguous_or_undefined(grad_gate),
                     rows_contiguous(query_proj),
                     rows_contiguous(head_proj),
                     rows_contiguous(value_proj),
                     v_b.contiguous(),
                     gate.contiguous(),
                     gradient_like(query_proj),  // grad_pre: also head_proj's gradient
                     gradient_like(value_proj),
                     at::zeros({p.hop_dim}, query_proj.options())};
  if (p.positions() == 0) return {t.grad_pre, t.grad_value_proj, t.grad_v_b};
  MMA_NMT_CPU_DISPATCH(head_gate_backward, p, t);
  return {t.grad_pre, t.grad_value_proj, t.grad_v_b};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> multihop_second_hop_cpu(
    const at::Tensor& q, const at::Tensor& a, const at::Tensor& w_b, const at::Tensor& u_b,
    const std::optional<at::Tensor>& u_c, const at::Tensor& v_b) {
  const char* op = "mma_nmt.multihop_second_hop";
  const SecondHopParams p = check_second_hop_args(op, q, a, w_b, u_b, u_c, v_b);
  check_cpu_floating(op, q);
  SecondHopForward t{rows_contiguous(q), rows_contiguous(a), w_b.contiguous(), u_b.contiguous(),
                     contiguous_or_undefined(u_c), v_b.contiguous(),
                     position_major(p.batch, p.heads, p.query_len, p.value_dim, q.options()),
                     at::empty({p.batch, p.heads, p.query_len}, q.options()),
                     position_major(p.batch, p.heads, p.query_len, p.hop_dim, q.options())};
  if (p.positions() > 0) MMA_NMT_CPU_DISPATCH(second_hop_forward, p, t);
  return {t.out, t.gate, t.hidden};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> multihop_second_hop_backward_cpu(
    const at::Tensor& grad_out, const std::optional<at::Tensor>& grad_gate, const at::Tensor& q, const at::Tensor& a,
    const at::Tensor& w_b, const at::Tensor& u_b, const std::optional<at::Tensor>& u_c, const at::Tensor& v_b,
    const at::Tensor& gate, const at::Tensor& hidden) {
  const char* op = "mma_nmt.multihop_second_hop_backward";
  const SecondHopParams p =
      check_second_hop_backward_args(op, grad_out, grad_gate, q, a, w_b, u_b, u_c, v_b, gate, hidden);
  check_cpu_floating(op, q);
  SecondHopBackward t{grad_out,  // any strides: the kernel gathers each row
                      contiguous_or_undefined(grad_gate),
                      rows_contiguous(q), rows_contiguous(a), w_b.contiguous(), u_b.contiguous(),
                      contiguous_or_undefined(u_c), v_b.contiguous(), gate.contiguous(),
                      rows_contiguous(hidden),
                      gradient_like(q), gradient_like(a),
                      at::zeros(w_b.sizes(), w_b.options()), at::zeros(u_b.sizes(), u_b.options()),
                      u_c.has_value() ? at::zeros(u_c->sizes(), u_c->options()) : at::Tensor(),
                      at::zeros(v_b.sizes(), v_b.options())};
  if (p.positions() > 0) MMA_NMT_CPU_DISPATCH(second_hop_backward, p, t);
  // Without u_c the schema still returns a tensor in its place: an empty one (autograd returns None for it).
  return {t.grad_q, t.grad_a, t.grad_w_b, t.grad_u_b, t.grad_u_c.defined() ? t.grad_u_c : at::empty({0}, q.options()),
          t.grad_v_b};
}

}  // namespace

TORCH_LIBRARY_IMPL(mma_nmt, CPU, m) {
  m.impl("multihop_gate", &multihop_gate_cpu);
  m.impl("multihop_gate_backward", &multihop_gate_backward_cpu);
  m.impl("multihop_second_hop", &multihop_second_hop_cpu);
  m.impl("multihop_second_hop_backward", &multihop_second_hop_backward_cpu);
}

}  // namespace mma_nmt::multihop::cpu
