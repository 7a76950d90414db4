// Memory layouts of (batch, heads, len, dim) head tensors as the CPU kernels read and write them in place: any strides
// over batch, heads and rows, the last dimension contiguous. The models' head views of their (B, L, H * D) projections
// are such tensors, so no copy is made on the way in, and results stored position-major, (B, L, H, dim) in memory, make
// merging the heads and the projections' backward views too. The fake kernels mirror these allocations
// (mma_nmt/ops/fake_layout.py: position_major, projection_gradient_like).
#pragma once

#include <ATen/ATen.h>

#include <optional>
#include <vector>

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
// Position-major where that layout would not leave the last dimension contiguous. `dtype`: another dtype than the
// input's (an accumulator in float), same layout. gradient_like_with: the same rule with other options (a device).
inline at::Tensor gradient_like_with(const at::Tensor& input, const at::TensorOptions& options) {
  at::Tensor grad = at::empty_like(input, options);
  if (grad.stride(-1) == 1 || grad.size(-1) <= 1) return grad;
  return position_major(input.size(0), input.size(1), input.size(2), input.size(3), options);
}

inline at::Tensor gradient_like(const at::Tensor& input, std::optional<at::ScalarType> dtype = std::nullopt) {
  return gradient_like_with(input, dtype.has_value() ? input.options().dtype(*dtype) : input.options());
}

// The strides gradient_like gives a gradient of `input` (in any dtype), read off a tensor on the meta device: no
// memory and no launch. Dense, so a gradient of that layout fills input.numel() consecutive elements.
inline std::vector<int64_t> gradient_strides(const at::Tensor& input) {
  return gradient_like_with(input, input.options().device(at::kMeta)).strides().vec();
}

// `x` (batch, heads, len, dim) as position_major allocates it: `x` itself when it has those strides, else a copy. For
// backends whose paths differ in layout (CUDA: FlashAttention, the SDPA composition, the hand-written kernels), so that
// every path returns what the fake kernel promises; free where the path already wrote it so.
inline at::Tensor as_position_major(const at::Tensor& x) {
  at::Tensor target = position_major(x.size(0), x.size(1), x.size(2), x.size(3), x.options());
  return x.strides() == target.strides() ? x : target.copy_(x);
}

// `grad` laid out as gradient_like(input) allocates it: `grad` itself when it is, else a copy (as as_position_major).
inline at::Tensor as_gradient_layout(const at::Tensor& grad, const at::Tensor& input) {
  at::Tensor target = gradient_like(input);
  return grad.strides() == target.strides() ? grad : target.copy_(grad);
}

}  // namespace mma_nmt
