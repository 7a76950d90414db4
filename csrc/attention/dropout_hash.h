// Counter-based attention dropout: whether weight (b, h, i, j) is kept is a pure function of (seed, flat index), so the
// backward pass, the CUDA kernel and the plain-PyTorch reference (mma_nmt/reference/dropout_hash.py) all redraw the same
// mask without storing it. Multipliers stay below 2^31 so the reference can run the same arithmetic in int64 tensors.
#pragma once

#include "common/host_device.h"

namespace mma_nmt::attention {

MMA_HOST_DEVICE uint32_t mix32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x2c1b3c6dU;
  x ^= x >> 16;
  return x;
}

// 24 uniform bits for element `flat_index` under `seed`.
MMA_HOST_DEVICE uint32_t dropout_bits(uint64_t seed, uint64_t flat_index) {
  uint32_t h = mix32(static_cast<uint32_t>(seed >> 32));
  h = mix32(h ^ static_cast<uint32_t>(seed & 0xffffffffU));
  h = mix32(h ^ static_cast<uint32_t>(flat_index >> 32));
  h = mix32(h ^ static_cast<uint32_t>(flat_index & 0xffffffffU));
  return h >> 8;
}

// Keep-threshold for drop probability p: an element is kept iff dropout_bits(...) >= threshold.
MMA_HOST_DEVICE uint32_t dropout_threshold(double drop_probability) {
  return static_cast<uint32_t>(drop_probability * 16777216.0);  // 2^24
}

}  // namespace mma_nmt::attention
