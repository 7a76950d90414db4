// A (batch, heads, len, dim) tensor as the CUDA kernels address it: any strides over batch, heads and rows, the last
// dimension contiguous (the layouts of common/head_layout.h). The models' head views of their (B, L, H * D)
// projections are such tensors, so they reach the kernels without a copy, and the kernels write their results
// position-major, (B, L, H, dim) in memory, which merging the heads and the projections' backward read as views.
// Plain data with HOST_DEVICE accessors: the kernels take it by value, the emulated tests run it on the CPU.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <type_traits>

#include "common/host_device.h"

namespace mma_nmt::gpu {

template <typename T>
struct HeadRows {
  T* data;
  int64_t batch_stride, head_stride, row_stride;  // in elements

  // Row 0 of head h of sentence b; its row i lies i * row_stride elements further.
  MMA_HOST_DEVICE T* head(int64_t b, int64_t h) const { return data + b * batch_stride + h * head_stride; }
  MMA_HOST_DEVICE T* row(int64_t b, int64_t h, int64_t i) const { return head(b, h) + i * row_stride; }
  // Row i of head bh = b * heads + h, for kernels that number the (sentence, head) pairs.
  MMA_HOST_DEVICE T* row_of(int64_t bh, int64_t heads, int64_t i) const { return row(bh / heads, bh % heads, i); }
};

// The rows of a 4-d tensor whose last dimension is contiguous (callers pass rows_contiguous(x) or tensors they
// allocated so); T may be const.
template <typename T>
HeadRows<T> head_rows(const at::Tensor& x) {
  TORCH_INTERNAL_ASSERT(x.dim() == 4 && (x.stride(3) == 1 || x.size(3) <= 1),
                        "head_rows: a (batch, heads, len, dim) tensor with contiguous rows, got sizes ", x.sizes(),
                        " and strides ", x.strides());
  return {static_cast<T*>(x.data_ptr<std::remove_const_t<T>>()), x.stride(0), x.stride(1), x.stride(2)};
}

// head_rows of `x`, or null rows (data nullptr, which the kernels test) for an undefined tensor: an optional input or
// output.
template <typename T>
HeadRows<T> head_rows_or_none(const at::Tensor& x) {
  return x.defined() ? head_rows<T>(x) : HeadRows<T>{nullptr, 0, 0, 0};
}

}  // namespace mma_nmt::gpu
