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
