// What the forward and backward CUDA kernels share: the kernel parameters, the warp-per-query-row layout and the
// per-row arithmetic. Mask, softmax and dropout rules themselves come from the HOST_DEVICE headers the CPU also uses.
#pragma once

#include "common/cuda_compat.h"  // first: under the emulator torch's headers must precede HIP's

#include <ATen/OpMathType.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <type_traits>

#include "attention/attention_params.h"
#include "attention/cuda/attention_cuda.h"
#include "attention/dropout_hash.h"
#include "attention/head_mask.h"
#include "common/head_rows.h"
#include "common/warp.cuh"

namespace mma_nmt::attention::cuda {

using gpu::kMaxWarpsPerBlock;  // query rows per block at most (gpu::Launch::warps_per_block)
using gpu::kWarpSize;
using gpu::warp_sum;  // sum over the 32 lanes, returned to every lane
// A lane's register slice of a row (elements lane, lane + 32, ...): load, store, dot product with a row in memory.
using gpu::load_slice;
using gpu::store_slice;
using gpu::warp_dot;

// AttentionParams without its std::vector, passed by value to the kernels.
struct KernelParams {
  int64_t heads, query_len, key_len, head_dim, value_dim;
  int64_t window, query_offset;
  double scale;
  bool dropout;
  uint32_t keep_threshold;  // keep iff dropout_bits >= keep_threshold
  double keep_scale;        // 1 / (1 - p): the weight of a kept element
  uint64_t seed;
  const int64_t* key_lengths;  // device pointer, or nullptr without padding
  uint8_t head_kinds[kMaxHeads];
};

// The caller has checked the CUDA limits (check_cuda_limits in attention_cuda.cpp).
inline KernelParams make_kernel_params(const AttentionParams& p, const at::Tensor& key_lengths) {
  TORCH_INTERNAL_ASSERT(p.heads <= kMaxHeads);
  KernelParams k{};
  k.heads = p.heads;
  k.query_len = p.query_len;
  k.key_len = p.key_len;
  k.head_dim = p.head_dim;
  k.value_dim = p.value_dim;
  k.window = p.window;
  k.query_offset = p.query_offset;
  k.scale = p.scale;
  k.dropout = p.dropout_p > 0.0;
  k.keep_threshold = dropout_threshold(p.dropout_p);
  k.keep_scale = 1.0 / (1.0 - p.dropout_p);
  k.seed = p.seed;
  k.key_lengths = key_lengths.defined() ? key_lengths.data_ptr<int64_t>() : nullptr;
  for (int64_t h = 0; h < p.heads; ++h) k.head_kinds[h] = static_cast<uint8_t>(p.head_kinds[h]);
  return k;
}

// Blocks of `warps_per_block` warps, one query row each: the warps the kernels read back as blockDim.x / kWarpSize.
inline dim3 row_block(const gpu::Launch& launch) { return gpu::warp_block(launch, "attention"); }

// Grid: x covers query rows warps_per_block at a time, y the heads, z the sentences.
inline dim3 row_grid(const AttentionParams& p, const gpu::Launch& launch) {
  const int64_t rows_per_block = launch.warps_per_block;
  return dim3(static_cast<unsigned>((p.query_len + rows_per_block - 1) / rows_per_block),
              static_cast<unsigned>(p.heads), static_cast<unsigned>(p.batch));
}

// Calls f with std::integral_constant<int, n>: the register slice per lane, n * 32 >= the larger head size.
template <typename F>
void with_values_per_lane(const AttentionParams& p, F&& f) {
  const int64_t dim = p.head_dim > p.value_dim ? p.head_dim : p.value_dim;
  if (dim <= 4 * kWarpSize) {
    f(std::integral_constant<int, 4>{});
  } else {
    f(std::integral_constant<int, 8>{});
  }
}

// The query row a warp owns, with its place in the (B, H, T, .) tensors and its visible keys.
struct RowCoordinates {
  int64_t b, h, i;
  int64_t row;  // (b * H + h) * T + i: index of the row in (B, H, T) tensors
  KeyRange keys;
  bool valid;  // false for the spare warps of the last block
};

__device__ __forceinline__ RowCoordinates locate_row(const KernelParams& p) {
  RowCoordinates r;
  r.b = blockIdx.z;
  r.h = blockIdx.y;
  const int64_t warps_per_block = blockDim.x / kWarpSize;
  r.i = static_cast<int64_t>(blockIdx.x) * warps_per_block + threadIdx.x / kWarpSize;
  r.valid = r.i < p.query_len;
  r.row = (r.b * p.heads + r.h) * p.query_len + r.i;
  const int64_t n_keys = keys_of_sentence(p.key_lengths, r.b, p.key_len);
  r.keys = visible_keys(p.head_kinds[r.h], r.i + p.query_offset, p.window, n_keys);
  return r;
}

// Dropout multiplier of weight (row, key j): 1 without dropout, else 0 (dropped) or 1 / (1 - p) (kept).
template <typename acc_t>
__device__ __forceinline__ acc_t keep_factor(const KernelParams& p, int64_t row, int64_t j) {
  if (!p.dropout) return acc_t(1);
  const uint64_t flat_index = static_cast<uint64_t>(row * p.key_len + j);  // ((b*H + h)*T + i)*S + j
  return dropout_bits(p.seed, flat_index) >= p.keep_threshold ? static_cast<acc_t>(p.keep_scale) : acc_t(0);
}

}  // namespace mma_nmt::attention::cuda
