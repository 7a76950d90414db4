// Argument checks shared by every operator: each error names the operator, the argument and what was expected.
#pragma once

#include <ATen/core/Tensor.h>

namespace mma_nmt {

// Sizes shared by every attention operator: q (batch, heads, query_len, head_dim), k (batch, heads, key_len, head_dim)
// and values of value_dim (also the output's last dimension). Each operator's params struct extends it.
struct AttentionSizes {
  int64_t batch = 0;
  int64_t heads = 0;
  int64_t query_len = 0;
  int64_t key_len = 0;
  int64_t head_dim = 0;   // D of q and k
  int64_t value_dim = 0;  // D of v and of the output
};

// Where the values live: one set per head, v (batch, heads, key_len, value_dim), or one set that every head shares,
// v (batch, key_len, value_dim) (multi-head Luong attention, SPEC section 2).
enum class ValueLayout { kPerHead, kSharedByHeads };

// Checks the ranks of q, k and v, that q is floating point and that k and v match q's sizes, dtype and device.
AttentionSizes check_query_key_value(const char* op_name, const at::Tensor& q, const at::Tensor& k,
                                     const at::Tensor& v, ValueLayout values);

// `t` must have `rank` dimensions; `layout` describes them, e.g. "(batch, heads, query_len, head_dim)".
void check_rank(const char* op_name, const char* arg_name, const at::Tensor& t, int64_t rank, const char* layout);

// `t` must have exactly `expected` sizes and the dtype and device of `like` (named `like_name` in the message).
void check_same_layout(const char* op_name, const char* arg_name, const at::Tensor& t, at::IntArrayRef expected,
                       const at::Tensor& like, const char* like_name = "q");

// The saved log-sum-exp a backward receives: `expected` sizes (described by `layout` in the message), dtype `dtype`
// (stats_dtype of the inputs'), and the device of `like`.
void check_lse(const char* op_name, const at::Tensor& lse, at::IntArrayRef expected, const char* layout,
               at::ScalarType dtype, const at::Tensor& like, const char* like_name = "q");

// Checks the tensors that backward receives beyond forward's inputs, on (B, H, L, ·) heads: grad_out and out
// (batch, heads, query_len, value_dim) like q, lse (batch, heads, query_len) of dtype `lse_type`.
void check_backward_extras(const char* op_name, const AttentionSizes& p, const at::Tensor& q,
                           const at::Tensor& grad_out, const at::Tensor& out, const at::Tensor& lse,
                           at::ScalarType lse_type);

// The CPU kernels are built for float32 and float64: `t` (named `name`) must be one of them.
void check_cpu_floating(const char* op_name, const at::Tensor& t, const char* name = "q");

// key_lengths: shape (batch,) like q, int64, q's device, values in [0, key_len] (read only for CPU tensors).
void check_key_lengths(const char* op_name, const at::Tensor& lengths, const at::Tensor& q, int64_t key_len);

}  // namespace mma_nmt
