// Memory layouts of (batch, heads, len, dim) head tensors as the CPU kernels read and write them in place: any strides
// over batch, heads and rows, the last dimension contiguous. The models' head views of their (B, L, H * D) projections
// are such tensors, so no copy is made on the way in, and results stored position-major, (B, L, H, dim) in memory, make
// merging the heads and the projections' backward views too. The fake kernels mirror these allocations
// (mma_nmt/ops/fake_layout.py: position_major, projection_gradient_like).
#pragma once

#include <ATen/ATen.h>

namespace mma_nmt {

// `t` itself when its rows are contiguous (only the last dimension has to be), else a contiguous copy.
inline at::Tensor rows_contiguous(const at::Tensor& t) {
  return t.stride(-1) == 1 || t.size(-1) <= 1 ? t : t.contiguous();
}

// An uninitialised (batch, heads, len, dim) tensor stored position-major: (batch, len, heads, dim) in memory.
inline at::Tensor position_major(int64_t batch, int64_t heads, int64_t len, int64_t dim,
                                 const at::TensorOptions& options) {
  return at::empty({batch, len, heads, dim}, options).transpose(1, 2);
}

// The gradient of a (batch, heads, len, dim) input, uninitialised, laid out like the input (empty_like keeps a dense
// input's strides and a strided input's dimension order), so that autograd hands it on without a copy: a head view of
// a projection gets a position-major gradient, which the projection's backward reads as its (B, L, H * D) gradient.
// Position-major where that layout would not leave the last dimension contiguous.
inline at::Tensor gradient_like(const at::Tensor& input) {
  at::Tensor grad = at::empty_like(input);
  if (grad.stride(-1) == 1 || grad.size(-1) <= 1) return grad;
  return position_major(input.size(0), input.size(1), input.size(2), input.size(3), input.options());
}

}  // namespace mma_nmt
