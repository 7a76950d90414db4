// Streaming softmax state for one query row (Milakov & Gimelshein, 2018): keys arrive tile by tile, the running maximum
// keeps every exponent <= 0, and the partial output is rescaled whenever the maximum grows. Shared by CPU and CUDA.
#pragma once

#include "common/host_device.h"

namespace mma_nmt {

template <typename acc_t>
struct OnlineSoftmax {
  acc_t max = negative_infinity<acc_t>();
  acc_t sum = 0;

  // Raises the running maximum to cover logits up to `tile_max`. Returns the factor by which everything accumulated so far
  // (the sum here, the caller's weighted values there) must be multiplied.
  MMA_HOST_DEVICE acc_t raise_max(acc_t tile_max) {
    if (!(tile_max > max)) {
      return acc_t(1);
    }
    const acc_t factor = max == negative_infinity<acc_t>() ? acc_t(0) : exp_of(max - tile_max);
    sum *= factor;
    max = tile_max;
    return factor;
  }

  // Unnormalised weight of one logit under the current maximum; call after raise_max covered it.
  MMA_HOST_DEVICE acc_t weight(acc_t logit) const { return exp_of(logit - max); }

  MMA_HOST_DEVICE void add(acc_t weight_value) { sum += weight_value; }

  // 1 / sum, or 0 for a row that saw no key (its output is then 0, never NaN).
  MMA_HOST_DEVICE acc_t inverse_sum() const { return sum > acc_t(0) ? acc_t(1) / sum : acc_t(0); }

  // The probability of a key with this logit once every key was added: exp(logit - max) / sum, accurate to float
  // rounding like a softmax, where exp(logit - lse) carries lse's rounding error (|lse| * eps); 0 for a row that saw
  // no key.
  MMA_HOST_DEVICE acc_t probability(acc_t logit) const { return sum > acc_t(0) ? exp_of(logit - max) / sum : acc_t(0); }

  // log(sum_j exp(logit_j)); -inf for a row that saw no key.
  MMA_HOST_DEVICE acc_t log_sum_exp() const { return sum > acc_t(0) ? max + log_of(sum) : negative_infinity<acc_t>(); }
};

// Probability of a key under a finished row, from the saved log-sum-exp; 0 for a fully masked row (lse = -inf).
template <typename acc_t>
MMA_HOST_DEVICE acc_t probability_from_lse(acc_t logit, acc_t lse) {
  return lse == negative_infinity<acc_t>() ? acc_t(0) : exp_of(logit - lse);
}

}  // namespace mma_nmt
