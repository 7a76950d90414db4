#include "common/checks.h"

#include <ATen/ATen.h>

namespace mma_nmt {

void check_rank(const char* op, const char* name, const at::Tensor& t, int64_t rank, const char* layout) {
  TORCH_CHECK_VALUE(t.dim() == rank, op, ": ", name, " must have shape ", layout, ", got a ", t.dim(),
                    "-d tensor of shape ", t.sizes());
}

void check_same_layout(const char* op, const char* name, const at::Tensor& t, at::IntArrayRef expected,
                       const at::Tensor& like, const char* like_name) {
  TORCH_CHECK_VALUE(t.sizes() == expected, op, ": ", name, " must have shape ", expected, ", got ", t.sizes());
  TORCH_CHECK_TYPE(t.scalar_type() == like.scalar_type(), op, ": ", name, " must have dtype ", like.scalar_type(),
                   " like ", like_name, ", got ", t.scalar_type());
  TORCH_CHECK_VALUE(t.device() == like.device(), op, ": ", name, " is on ", t.device(), " but ", like_name, " is on ",
                    like.device());
}

AttentionSizes check_query_key_value(const char* op, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                     ValueLayout values) {
  const bool shared = values == ValueLayout::kSharedByHeads;
  check_rank(op, "q", q, 4, "(batch, heads, query_len, head_dim)");
  check_rank(op, "k", k, 4, "(batch, heads, key_len, head_dim)");
  if (shared) {
    check_rank(op, "v", v, 3, "(batch, key_len, value_dim) (one value set shared by every head)");
  } else {
    check_rank(op, "v", v, 4, "(batch, heads, key_len, value_dim)");
  }
  TORCH_CHECK_TYPE(at::isFloatingType(q.scalar_type()), op, ": q must be a floating-point tensor, got ",
                   q.scalar_type());
  AttentionSizes s;
  s.batch = q.size(0);
  s.heads = q.size(1);
  s.query_len = q.size(2);
  s.head_dim = q.size(3);
  s.key_len = k.size(2);
  s.value_dim = v.size(v.dim() - 1);
  check_same_layout(op, "k", k, {s.batch, s.heads, s.key_len, s.head_dim}, q);
  if (shared) {
    check_same_layout(op, "v", v, {s.batch, s.key_len, s.value_dim}, q);
  } else {
    check_same_layout(op, "v", v, {s.batch, s.heads, s.key_len, s.value_dim}, q);
  }
  return s;
}

void check_lse(const char* op, const at::Tensor& lse, at::IntArrayRef expected, const char* layout,
               at::ScalarType dtype, const at::Tensor& like, const char* like_name) {
  TORCH_CHECK_VALUE(lse.sizes() == expected, op, ": lse must have shape ", layout, ", got ", lse.sizes());
  TORCH_CHECK_TYPE(lse.scalar_type() == dtype, op, ": lse must have dtype ", dtype, ", got ", lse.scalar_type());
  TORCH_CHECK_VALUE(lse.device() == like.device(), op, ": lse is on ", lse.device(), " but ", like_name, " is on ",
                    like.device());
}

void check_backward_extras(const char* op, const AttentionSizes& p, const at::Tensor& q, const at::Tensor& grad_out,
                           const at::Tensor& out, const at::Tensor& lse, at::ScalarType lse_type) {
  check_same_layout(op, "grad_out", grad_out, {p.batch, p.heads, p.query_len, p.value_dim}, q);
  check_same_layout(op, "out", out, {p.batch, p.heads, p.query_len, p.value_dim}, q);
  check_lse(op, lse, {p.batch, p.heads, p.query_len}, "(batch, heads, query_len)", lse_type, q);
}

void check_cpu_floating(const char* op, const at::Tensor& t, const char* name) {
  TORCH_CHECK_TYPE(t.scalar_type() == at::kFloat || t.scalar_type() == at::kDouble, op, ": on the CPU ", name,
                   " must be float32 or float64, got ", t.scalar_type());
}

void check_key_lengths(const char* op, const at::Tensor& lengths, const at::Tensor& q, int64_t key_len) {
  TORCH_CHECK_VALUE(lengths.dim() == 1 && lengths.size(0) == q.size(0), op,
                    ": key_lengths must have shape (batch,) = (", q.size(0), ",), got ", lengths.sizes());
  TORCH_CHECK_TYPE(lengths.scalar_type() == at::kLong, op, ": key_lengths must be int64, got ", lengths.scalar_type());
  TORCH_CHECK_VALUE(lengths.device() == q.device(), op, ": key_lengths is on ", lengths.device(), " but q is on ",
                    q.device());
  if (lengths.is_cpu() && lengths.numel() > 0) {
    const int64_t lo = lengths.min().item<int64_t>();
    const int64_t hi = lengths.max().item<int64_t>();
    TORCH_CHECK_VALUE(lo >= 0 && hi <= key_len, op, ": key_lengths must lie in [0, key_len=", key_len,
                      "], got values in [", lo, ", ", hi, "]");
  }
}

}  // namespace mma_nmt
