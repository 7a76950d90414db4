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

}  // namespace mma_nmt::multihop
