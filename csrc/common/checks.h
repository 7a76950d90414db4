// Argument checks shared by every operator: each error names the operator, the argument and what was expected.
#pragma once

#include <ATen/core/Tensor.h>

namespace mma_nmt {

// `t` must have `rank` dimensions; `layout` describes them, e.g. "(batch, heads, query_len, head_dim)".
void check_rank(const char* op_name, const char* arg_name, const at::Tensor& t, int64_t rank, const char* layout);

// `t` must have exactly `expected` sizes and the dtype and device of `like` (named `like_name` in the message).
void check_same_layout(const char* op_name, const char* arg_name, const at::Tensor& t, at::IntArrayRef expected,
                       const at::Tensor& like, const char* like_name = "q");

// key_lengths: shape (batch,) like q, int64, q's device, values in [0, key_len] (read only for CPU tensors).
void check_key_lengths(const char* op_name, const at::Tensor& lengths, const at::Tensor& q, int64_t key_len);

}  // namespace mma_nmt
