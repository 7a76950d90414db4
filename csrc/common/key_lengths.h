// Key padding given as lengths, read the same way by every operator's CPU and CUDA kernels.
#pragma once

#include "common/host_device.h"

namespace mma_nmt {

// Sentence b's number of real keys: key_lengths[b] clamped to [0, key_len], or key_len without padding (null lengths).
// The CUDA kernels read the lengths on the device and so cannot reject out-of-range values on the host; they clamp.
MMA_HOST_DEVICE int64_t keys_of_sentence(const int64_t* key_lengths, int64_t b, int64_t key_len) {
  if (key_lengths == nullptr) return key_len;
  const int64_t n = key_lengths[b];
  return n < 0 ? 0 : (n > key_len ? key_len : n);
}

}  // namespace mma_nmt
