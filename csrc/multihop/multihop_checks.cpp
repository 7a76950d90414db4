#include <ATen/ATen.h>

#include "common/checks.h"
#include "multihop/head_gate.h"
#include "multihop/multihop_params.h"

namespace mma_nmt::multihop {

HeadGateParams check_head_gate_args(const char* op, const at::Tensor& query_proj, const at::Tensor& head_proj,
                                    const at::Tensor& value_proj, const at::Tensor& v_b) {
  check_rank(op, "query_proj", query_proj, 4, "(batch, heads, query_len, hop_dim)");
  check_rank(op, "value_proj", value_proj, 4, "(batch, heads, query_len, value_dim)");
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
  check_same_layout(op, "head_proj", head_proj, {p.batch, p.heads, p.query_len, p.hop_dim}, query_proj, "query_proj");
  check_same_layout(op, "value_proj", value_proj, {p.batch, p.heads, p.query_len, p.value_dim}, query_proj,
                    "query_proj");
  check_same_layout(op, "v_b", v_b, {p.hop_dim}, query_proj, "query_proj");
  return p;
}

void check_head_gate_backward_extras(const char* op, const HeadGateParams& p, const at::Tensor& query_proj,
                                     const at::Tensor& grad_out, const std::optional<at::Tensor>& grad_gate,
                                     const at::Tensor& gate) {
  check_same_layout(op, "grad_out", grad_out, {p.batch, p.heads, p.query_len, p.value_dim}, query_proj, "query_proj");
  check_same_layout(op, "gate", gate, {p.batch, p.heads, p.query_len}, query_proj, "query_proj");
  if (grad_gate.has_value()) {
    check_same_layout(op, "grad_gate", *grad_gate, {p.batch, p.heads, p.query_len}, query_proj, "query_proj");
  }
}

SecondHopParams check_second_hop_args(const char* op, const at::Tensor& q, const at::Tensor& a, const at::Tensor& w_b,
                                      const at::Tensor& u_b, const std::optional<at::Tensor>& u_c,
                                      const at::Tensor& v_b) {
  check_rank(op, "q", q, 4, "(batch, heads, query_len, head_dim)");
  check_rank(op, "w_b", w_b, 2, "(hop_dim, head_dim)");
  TORCH_CHECK_TYPE(at::isFloatingType(q.scalar_type()), op, ": q must be a floating-point tensor, got ",
                   q.scalar_type());
  SecondHopParams p;
  p.batch = q.size(0);
  p.heads = q.size(1);
  p.query_len = q.size(2);
  p.head_dim = q.size(3);
  p.hop_dim = w_b.size(0);
  p.project_values = u_c.has_value();
  TORCH_CHECK_VALUE(p.heads >= 1 && p.heads <= kMaxHeads, op, ": the number of heads must be in [1, ", kMaxHeads,
                    "], got ", p.heads);
  TORCH_CHECK_VALUE(p.head_dim >= 1 && p.hop_dim >= 1, op, ": head_dim and hop_dim must be at least 1, got ",
                    p.head_dim, " and ", p.hop_dim);
  check_same_layout(op, "a", a, {p.batch, p.heads, p.query_len, p.head_dim}, q, "q");
  check_same_layout(op, "w_b", w_b, {p.hop_dim, p.head_dim}, q, "q");
  check_same_layout(op, "u_b", u_b, {p.heads, p.hop_dim, p.head_dim}, q, "q");
  if (u_c.has_value()) {
    check_rank(op, "u_c", *u_c, 3, "(heads, value_dim, head_dim)");
    p.value_dim = u_c->size(1);
    TORCH_CHECK_VALUE(p.value_dim >= 1, op, ": u_c must have at least one row per head, got ", p.value_dim);
    check_same_layout(op, "u_c", *u_c, {p.heads, p.value_dim, p.head_dim}, q, "q");
  } else {
    p.value_dim = p.head_dim;
  }
  check_same_layout(op, "v_b", v_b, {p.hop_dim}, q, "q");
  return p;
}

SecondHopParams check_second_hop_backward_args(const char* op, const at::Tensor& grad_out,
                                               const std::optional<at::Tensor>& grad_gate, const at::Tensor& q,
                                               const at::Tensor& a, const at::Tensor& w_b, const at::Tensor& u_b,
                                               const std::optional<at::Tensor>& u_c, const at::Tensor& v_b,
                                               const at::Tensor& gate, const at::Tensor& hidden) {
  const SecondHopParams p = check_second_hop_args(op, q, a, w_b, u_b, u_c, v_b);
  check_same_layout(op, "grad_out", grad_out, {p.batch, p.heads, p.query_len, p.value_dim}, q, "q");
  check_same_layout(op, "gate", gate, {p.batch, p.heads, p.query_len}, q, "q");
  check_same_layout(op, "hidden", hidden, {p.batch, p.heads, p.query_len, p.hop_dim}, q, "q");
  if (grad_gate.has_value()) {
    check_same_layout(op, "grad_gate", *grad_gate, {p.batch, p.heads, p.query_len}, q, "q");
  }
  return p;
}

}  // namespace mma_nmt::multihop
