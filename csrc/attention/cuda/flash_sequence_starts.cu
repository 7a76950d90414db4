// The sequence-starts kernel (flash_sequence_starts_kernel.cuh) on the current CUDA stream.
#include "attention/cuda/flash_sequence_starts_kernel.cuh"

#include "attention/cuda/attention_cuda.h"
#include "common/cuda_launch.h"

namespace mma_nmt::attention::cuda {

at::Tensor flash_sequence_starts(const at::Tensor& key_lengths, int64_t query_len, int64_t key_len) {
  return run_flash_sequence_starts(key_lengths, query_len, key_len, gpu::current_launch());
}

}  // namespace mma_nmt::attention::cuda
