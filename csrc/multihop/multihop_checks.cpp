#include <ATen/ATen.h>

#include "multihop/head_gate.h"
#include "multihop/multihop_params.h"

namespace mma_nmt::multihop {
namespace {

void check_like(const char* op, const char* name, const at::Tensor& t, at::IntArrayRef expected,
                const at::Tensor& like) {
  TORCH_CHECK_VALUE(t.sizes() == expected, op, ": ", name, " must have shape ", expected, ", got ", t.sizes());
  TORCH_CHECK_TYPE(t.scalar_type() == like.scalar_type(), op, ": ", name, " must have dtype ", like.scalar_type(),
                   " like query_proj, got ", t.scalar_type());
  TORCH_CHECK_VALUE(t.device() == like.device(), op, ": ", name, " is on ", t.device(), " but query_proj is on ",
                    like.device());
}

}  // namespace

HeadGateParams check_head_gate_args(const char* op, const at::Tensor& query_proj, const at::Tensor& head_proj,
                                    const at::Tensor& value_proj, const at::Tensor& v_b) {
  TORCH_CHECK_VALUE(query_proj.dim() == 4, op,
                    ": query_proj must have shape (batch, heads, query_len, hop_dim), got a ", query_proj.dim(),
                    "-d tensor of shape ", query_proj.sizes());
  TORCH_CHECK_VALUE(value_proj.dim() == 4, op,
                    ": value_proj must have shape (batch, heads, query_len, value_dim), got a ", value_proj.dim(),
                    "-d tensor of shape ", value_proj.sizes());
  TORCH_CHECK_TYPE(at::isFloatingType(query_proj.scalar_type()), op,
                   ": query_proj must be a floating-point tensor, got ", query_proj.scalar_type());
  HeadGateParams p;
  p.batch = query_proj.size(0);
  p.heads = query_proj.size(1);
  p.query_len = query_proj.size(2);
  p.hop_dim = query_proj.size(3);
  p.value_dim = value_proj.size(3);
  TORCH_CHECK_VALUE(p.heads >= 1 && p.heads <= kMaxHeads, op, ": the number of heads must be in [1, ", kMaxHeads,
                    "], got ", p.heads);
  check_like(op, "head_proj", head_proj, {p.batch, p.heads, p.query_len, p.hop_dim}, query_proj);
  check_like(op, "value_proj", value_proj, {p.batch, p.heads, p.query_len, p.value_dim}, query_proj);
  check_like(op, "v_b", v_b, {p.hop_dim}, query_proj);
  return p;
}

void check_head_gate_backward_extras(const char* op, const HeadGateParams& p, const at::Tensor& query_proj,
                                     const at::Tensor& grad_out, const std::optional<at::Tensor>& grad_gate,
                                     const at::Tensor& gate) {
  check_like(op, "grad_out", grad_out, {p.batch, p.heads, p.query_len, p.value_dim}, query_proj);
  check_like(op, "gate", gate, {p.batch, p.heads, p.query_len}, query_proj);
  if (grad_gate.has_value()) check_like(op, "grad_gate", *grad_gate, {p.batch, p.heads, p.query_len}, query_proj);
}

}  // namespace mma_nmt::multihop
