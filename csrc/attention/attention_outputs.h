// Output allocation shared by the CPU and CUDA implementations (and mirrored by the fake kernel in Python).
#pragma once

#include <ATen/ATen.h>

#include <tuple>

#include "attention/attention_params.h"

namespace mma_nmt::attention {

// log-sum-exp is kept in float32 for half-precision inputs, else in the input's dtype.
inline at::ScalarType lse_dtype(at::ScalarType input) {
  return (input == at::kHalf || input == at::kBFloat16) ? at::kFloat : input;
}

struct ForwardOutputs {
  at::Tensor out;    // (B, H, T, Dv)
  at::Tensor lse;    // (B, H, T)
  at::Tensor probs;  // (B, H, T, S) when asked for, else an empty (0,) tensor
};

inline ForwardOutputs allocate_forward_outputs(const AttentionParams& p, const at::Tensor& q, bool return_probs) {
  ForwardOutputs o;
  o.out = at::empty({p.batch, p.heads, p.query_len, p.value_dim}, q.options());
  o.lse = at::empty({p.batch, p.heads, p.query_len}, q.options().dtype(lse_dtype(q.scalar_type())));
  o.probs = return_probs ? at::zeros({p.batch, p.heads, p.query_len, p.key_len}, q.options())
                         : at::empty({0}, q.options());
  return o;
}

// The saved log-sum-exp a backward receives: `expected` sizes (described by `layout` in the message), dtype `dtype`
// (lse_dtype of the inputs' for attention), and the device of `like`.
inline void check_lse(const char* op, const at::Tensor& lse, at::IntArrayRef expected, const char* layout,
                      at::ScalarType dtype, const at::Tensor& like, const char* like_name = "q") {
  TORCH_CHECK_VALUE(lse.sizes() == expected, op, ": lse must have shape ", layout, ", got ", lse.sizes());
  TORCH_CHECK_TYPE(lse.scalar_type() == dtype, op, ": lse must have dtype ", dtype, ", got ", lse.scalar_type());
  TORCH_CHECK_VALUE(lse.device() == like.device(), op, ": lse is on ", lse.device(), " but ", like_name, " is on ",
                    like.device());
}

// Checks the tensors that backward receives beyond forward's inputs, on (B, H, L, ·) heads; `lse_type` is the dtype
// the forward gave lse.
inline void check_backward_extras(const char* op, const AttentionSizes& p, const at::Tensor& q,
                                  const at::Tensor& grad_out, const at::Tensor& out, const at::Tensor& lse,
                                  at::ScalarType lse_type) {
  check_same_layout(op, "grad_out", grad_out, {p.batch, p.heads, p.query_len, p.value_dim}, q);
  check_same_layout(op, "out", out, {p.batch, p.heads, p.query_len, p.value_dim}, q);
  check_lse(op, lse, {p.batch, p.heads, p.query_len}, "(batch, heads, query_len)", lse_type, q);
}

}  // namespace mma_nmt::attention
