// Small tensor helpers of every operator's host code: the dtype of saved row statistics and optional inputs handed to
// a kernel.
#pragma once

#include <optional>

#include <ATen/core/Tensor.h>

namespace mma_nmt {

// float16 or bfloat16.
inline bool is_half_precision(at::ScalarType dtype) { return dtype == at::kHalf || dtype == at::kBFloat16; }

// Row statistics (log-sum-exp, log mass, the GMM's saved contexts) are kept in float32 for half-precision inputs, else
// in the input's dtype.
inline at::ScalarType stats_dtype(at::ScalarType input) { return is_half_precision(input) ? at::kFloat : input; }

// An optional input made contiguous, or an undefined tensor when absent (kernels test `defined()`).
inline at::Tensor contiguous_or_undefined(const std::optional<at::Tensor>& t) {
  return t.has_value() ? t->contiguous() : at::Tensor();
}

}  // namespace mma_nmt
