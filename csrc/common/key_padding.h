// The key padding of a batch as a device tensor, for the compositions (attention, GMM, shared-value) that hand masks to
// ATen and SDPA instead of looping over each sentence's keys as the kernels do.
#pragma once

#include <ATen/ATen.h>

#include <optional>
#include <vector>

namespace mma_nmt {

// (B, 1, 1, S) bool, true at the keys past each sentence's length. Lengths are clamped to [0, S] as the kernels clamp
// them (keys_of_sentence), on the device: the CUDA operators never read lengths on the host.
inline at::Tensor keys_past_sentence(const at::Tensor& key_lengths, int64_t key_len) {
  const at::Tensor lengths = key_lengths.clamp(0, key_len).view({-1, 1, 1, 1});     // (B, 1, 1, 1)
  return at::arange(key_len, lengths.options()).view({1, 1, 1, key_len}) >= lengths;  // (B, 1, 1, S)
}

// keys_past_sentence's mask, or an undefined tensor without key lengths: for the compositions that build it once per
// call and hand it to every use (without_padding_keys, their own masks).
inline at::Tensor padding_mask(const std::optional<at::Tensor>& key_lengths, int64_t key_len) {
  return key_lengths.has_value() ? keys_past_sentence(*key_lengths, key_len) : at::Tensor();
}

// x (B, ..., S, D) with the keys past each sentence's length set to 0; x itself without key_lengths. The compositions
// call this on their keys and values before any product: torch's kernels (SDPA, matmul) multiply a padding key's
// weight 0 by its value, and a masked logit is NaN + (-inf) = NaN, so a NaN behind the padding reached every row.
// `padding`: the (B, 1, 1, S) mask of keys_past_sentence, computed once by a caller that needs it again (undefined:
// no padding, x itself).
inline at::Tensor without_padding_keys(const at::Tensor& x, const at::Tensor& padding) {
  if (!padding.defined()) return x;
  std::vector<int64_t> shape(x.dim(), 1);  // (B, 1, ..., S, 1)
  shape[0] = x.size(0);
  shape[x.dim() - 2] = x.size(-2);
  return x.masked_fill(padding.view(shape), 0.0);
}

inline at::Tensor without_padding_keys(const at::Tensor& x, const std::optional<at::Tensor>& key_lengths) {
  if (!key_lengths.has_value()) return x;
  return without_padding_keys(x, keys_past_sentence(*key_lengths, x.size(-2)));
}

}  // namespace mma_nmt
