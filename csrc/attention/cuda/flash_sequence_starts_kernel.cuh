// The cumulative sequence starts of a padded batch for FlashAttention-2 (attention/flash_sequence_starts.h) in one
// launch: a thread per entry of the (3, 3 B + 1) int32 table, reading the key lengths on the device (no host read, so
// CUDA graphs can capture it). It replaces the dozen small ATen ops (clamp, arange, adds, cat, pad) that built the
// three rows before, per operator call and per direction.
//
// Device source: compiled by nvcc (flash_sequence_starts.cu) and by the host compiler under the HIP CPU emulator
// (tests/cpp/emulated), so it holds no CUDA-only calls; common/cuda_compat.h maps the names it uses.
#pragma once

#include "common/cuda_compat.h"  // first: under the emulator, torch's headers before HIP's

#include <ATen/ATen.h>

#include <cstdint>

#include "attention/flash_sequence_starts.h"

namespace mma_nmt::attention::cuda {

__global__ void flash_sequence_starts_kernel(const int64_t* key_lengths, int64_t batch, int64_t query_len,
                                             int64_t key_len, int32_t* table) {
  const int64_t entries = flash_starts_entries(batch);
  const int64_t index = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index >= kFlashStartsRows * entries) return;
  const int row = static_cast<int>(index / entries);
  table[index] = flash_sequence_start(row, index % entries, batch, key_lengths, query_len, key_len);
}

// (3, 3 B + 1) int32 on key_lengths' device: rows kKeyStarts, kEveryQueryStarts, kRealQueryStarts, each a contiguous
// view FA2 takes as cu_seqlens. `key_lengths`: (B,) int64.
inline at::Tensor run_flash_sequence_starts(const at::Tensor& key_lengths, int64_t query_len, int64_t key_len,
                                            const gpu::Launch& launch) {
  const int64_t batch = key_lengths.size(0);
  check_flash_rows_fit_int32(batch, query_len, key_len);
  const at::Tensor lengths = key_lengths.contiguous();
  at::Tensor table = at::empty({kFlashStartsRows, flash_starts_entries(batch)}, lengths.options().dtype(at::kInt));
  constexpr int kThreads = 128;
  const int64_t blocks = (table.numel() + kThreads - 1) / kThreads;
  gpu::launch_kernel(flash_sequence_starts_kernel, dim3(static_cast<unsigned>(blocks)), dim3(kThreads), 0, launch,
                     lengths.data_ptr<int64_t>(), batch, query_len, key_len, table.data_ptr<int32_t>());
  return table;
}

}  // namespace mma_nmt::attention::cuda
