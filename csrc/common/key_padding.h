// The key padding of a batch as a device tensor, for the compositions (attention, GMM, shared-value) that hand masks to
// ATen and SDPA instead of looping over each sentence's keys as the kernels do.
#pragma once

#include <ATen/ATen.h>

namespace mma_nmt {

// (B, 1, 1, S) bool, true at the keys past each sentence's length. Lengths are clamped to [0, S] as the kernels clamp
// them (keys_of_sentence), on the device: the CUDA operators never read lengths on the host.
inline at::Tensor keys_past_sentence(const at::Tensor& key_lengths, int64_t key_len) {
  const at::Tensor lengths = key_lengths.clamp(0, key_len).view({-1, 1, 1, 1});     // (B, 1, 1, 1)
  return at::arange(key_len, lengths.options()).view({1, 1, 1, key_len}) >= lengths;  // (B, 1, 1, S)
}

}  // namespace mma_nmt
