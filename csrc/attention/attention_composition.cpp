#include "attention/attention_composition.h"

#include <ATen/ATen.h>

#include <limits>

#include "attention/attention_outputs.h"
#include "attention/head_mask.h"

namespace mma_nmt::attention {
namespace {

// The visibility of a uniform head kind in the forms SDPA takes: nothing (every key), is_causal, or a boolean mask.
struct SdpaVisibility {
  std::optional<at::Tensor> mask;  // (B or 1, 1, T, S) bool, true = visible (see empty_rows); passed as additive_bias
  bool is_causal = false;
  // (B or 1, 1, T) bool, rows with no visible key, or undefined where there are none by construction. SDPA's softmax
  // over such a row is 0/0, so the mask shows those rows every key and the results are fixed afterwards: zero output,
  // lse -inf (forward); zero grad_out and lse +inf, which make every weight exp(s - inf) = 0 (backward).
  at::Tensor empty_rows;
};

// The rule of head_mask.h (visible_keys) as a (T, S) boolean table, for the kinds composable() accepts.
at::Tensor kind_rule(const AttentionParams& p, int64_t kind, const at::TensorOptions& options) {
  const at::Tensor position = at::arange(p.query_len, options).add_(p.query_offset).view({p.query_len, 1});  // (T, 1)
  const at::Tensor key = at::arange(p.key_len, options).view({1, p.key_len});                                // (1, S)
  switch (kind) {
    case kForward:
      return key >= position;
    case kBackward:
    case kCausal:
      return key <= position;
    default:  // kGlobal
      return at::ones({p.query_len, p.key_len}, options.dtype(at::kBool));
  }
}

SdpaVisibility sdpa_visibility(const AttentionParams& p, const at::Tensor& q,
                               const std::optional<at::Tensor>& key_lengths) {
  const int64_t kind = p.head_kinds[0];
  const bool padded = key_lengths.has_value();
  if (!padded && kind == kGlobal) return {};
  if (!padded && (kind == kCausal || kind == kBackward) && p.query_len == p.key_len && p.query_offset == 0) {
    return {std::nullopt, true, at::Tensor()};  // SDPA's is_causal: key j <= query i, the flash kernels' fast path
  }
  const auto index = q.options().dtype(at::kLong);
  at::Tensor visible = kind_rule(p, kind, index).view({1, 1, p.query_len, p.key_len});  // (1, 1, T, S)
  if (padded) {
    // Clamped as the kernels clamp them (keys_of_sentence): the CUDA op does not read lengths on the host.
    const at::Tensor lengths = key_lengths->to(index).clamp(0, p.key_len).view({p.batch, 1, 1, 1});
    visible = visible & (at::arange(p.key_len, index).view({1, 1, 1, p.key_len}) < lengths);  // (B, 1, T, S)
  }
  const at::Tensor empty = visible.any(-1, /*keepdim=*/true).logical_not_();  // (B or 1, 1, T, 1)
  return {visible | empty, false, empty.squeeze(-1)};
}

// --- torch's fused kernels; the only device-specific code of this file ------------------------------------------
// at::_fused_sdp_choice's answer (sdp::SDPBackend in ATen/native/transformers/sdp_utils_cpp.h).
constexpr int64_t kFlashBackend = 1;
constexpr int64_t kEfficientBackend = 2;

struct SdpaCall {
  const at::Tensor& q;
  const at::Tensor& k;
  const at::Tensor& v;
  const SdpaVisibility& visibility;
  double scale;
};

int64_t cuda_backend(const SdpaCall& c) {
  return at::_fused_sdp_choice(c.q, c.k, c.v, c.visibility.mask, 0.0, c.visibility.is_causal, c.scale);
}

// The fused kernels take the mask as an additive bias of q's dtype: (B or 1, H, T, S), 0 where visible and -inf
// elsewhere. Its rows start 16-element aligned, as the memory-efficient kernel requires (S rounded up to 16, as torch's
// own SDPA pads it); the CPU flash kernel takes the same tensor.
at::Tensor additive_bias(const SdpaCall& c) {
  const at::Tensor& mask = *c.visibility.mask;
  const int64_t key_len = mask.size(3), padded_len = (key_len + 15) / 16 * 16;
  at::Tensor bias = at::empty({mask.size(0), 1, mask.size(2), padded_len}, c.q.options()).narrow(3, 0, key_len);
  bias.fill_(-std::numeric_limits<double>::infinity()).masked_fill_(mask, 0.0);
  return bias.expand({mask.size(0), c.q.size(1), mask.size(2), key_len});
}

// (out, lse (B, H, T)) of torch's fused forward, or nullopt where it has none for these inputs.
std::optional<std::pair<at::Tensor, at::Tensor>> fused_forward(const SdpaCall& c) {
  const bool causal = c.visibility.is_causal;
  const std::optional<at::Tensor> bias =
      c.visibility.mask.has_value() ? std::optional<at::Tensor>(additive_bias(c)) : std::nullopt;
  if (!c.q.is_cuda()) {
    auto [out, lse] = at::_scaled_dot_product_flash_attention_for_cpu(c.q, c.k, c.v, 0.0, causal, bias, c.scale);
    return std::make_pair(out, lse);
  }
  const int64_t backend = cuda_backend(c);
  if (backend == kFlashBackend && !c.visibility.mask.has_value()) {
    const auto r = at::_scaled_dot_product_flash_attention(c.q, c.k, c.v, 0.0, causal, false, c.scale);
    return std::make_pair(std::get<0>(r), std::get<1>(r));
  }
  if (backend == kEfficientBackend) {
    const auto r = at::_scaled_dot_product_efficient_attention(c.q, c.k, c.v, bias, true, 0.0, causal, c.scale);
    return std::make_pair(std::get<0>(r), std::get<1>(r).narrow(2, 0, c.q.size(2)));  // lse is padded to 32 rows
  }
  return std::nullopt;
}

// (grad_q, grad_k, grad_v) of torch's fused backward from out and lse (B, H, T), or nullopt as fused_forward.
std::optional<std::tuple<at::Tensor, at::Tensor, at::Tensor>> fused_backward(const SdpaCall& c,
                                                                             const at::Tensor& grad_out,
                                                                             const at::Tensor& out,
                                                                             const at::Tensor& lse) {
  const bool causal = c.visibility.is_causal;
  const at::Tensor bias = c.visibility.mask.has_value() ? additive_bias(c) : at::Tensor();
  if (!c.q.is_cuda()) {
    return at::_scaled_dot_product_flash_attention_for_cpu_backward(
        grad_out, c.q, c.k, c.v, out, lse, 0.0, causal, bias.defined() ? std::optional<at::Tensor>(bias) : std::nullopt,
        c.scale);
  }
  const int64_t backend = cuda_backend(c);
  const at::Tensor no_rng = at::empty({0}, c.q.options().dtype(at::kLong));  // philox state: unused without dropout
  if (backend == kFlashBackend && !c.visibility.mask.has_value()) {
    return at::_scaled_dot_product_flash_attention_backward(grad_out, c.q, c.k, c.v, out, lse, at::Tensor(),
                                                            at::Tensor(), c.q.size(2), c.k.size(2), 0.0, causal,
                                                            no_rng, no_rng, c.scale);
  }
  if (backend == kEfficientBackend) {
    const int64_t rows = c.q.size(2), padded_rows = (rows + 31) / 32 * 32;
    const at::Tensor padded_lse = at::constant_pad_nd(lse, {0, padded_rows - rows}, 0.0);  // its forward's layout
    auto [dq, dk, dv, dbias] = at::_scaled_dot_product_efficient_attention_backward(
        grad_out, c.q, c.k, c.v, bias, out, padded_lse, no_rng, no_rng, 0.0, {true, true, true, false}, causal,
        c.scale);
    return std::make_tuple(dq, dk, dv);
  }
  return std::nullopt;
}
// --- end of the device-specific code ------------------------------------------------------------------------------

}  // namespace

bool composable(const AttentionParams& p, bool return_probs) {
  if (return_probs || p.dropout_p > 0.0 || p.head_kinds.empty()) return false;
  if (p.head_dim != p.value_dim || p.head_dim == 0 || p.query_len == 0 || p.key_len == 0 || p.batch == 0) {
    return false;
  }
  for (const int64_t kind : p.head_kinds) {
    if (kind != p.head_kinds[0]) return false;
  }
  // A local head sees 2w + 1 keys: the hand-written kernel visits just those, SDPA would do T x S work.
  return p.head_kinds[0] != kLocal;
}

std::optional<std::tuple<at::Tensor, at::Tensor, at::Tensor>> attention_forward_by_sdpa(
    const AttentionParams& p, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const std::optional<at::Tensor>& key_lengths) {
  const SdpaVisibility visibility = sdpa_visibility(p, q, key_lengths);
  const auto result = fused_forward({q, k, v, visibility, p.scale});
  if (!result.has_value()) return std::nullopt;
  at::Tensor out = result->first.contiguous();                            // (B, H, T, Dv)
  at::Tensor lse = result->second.to(stats_dtype(q.scalar_type())).contiguous();  // (B, H, T)
  if (visibility.empty_rows.defined()) {
    out.masked_fill_(visibility.empty_rows.unsqueeze(-1), 0.0);
    lse.masked_fill_(visibility.empty_rows, -std::numeric_limits<double>::infinity());
  }
  return std::make_tuple(out, lse, at::empty({0}, q.options()));
}

std::optional<std::tuple<at::Tensor, at::Tensor, at::Tensor>> attention_backward_by_sdpa(
    const AttentionParams& p, const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k,
    const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse, const std::optional<at::Tensor>& key_lengths) {
  const SdpaVisibility visibility = sdpa_visibility(p, q, key_lengths);
  at::Tensor grad = grad_out, row_lse = lse;
  if (visibility.empty_rows.defined()) {
    grad = grad_out.masked_fill(visibility.empty_rows.unsqueeze(-1), 0.0);
    row_lse = lse.masked_fill(visibility.empty_rows, std::numeric_limits<double>::infinity());
  }
  const auto grads = fused_backward({q, k, v, visibility, p.scale}, grad, out, row_lse);
  if (!grads.has_value()) return std::nullopt;
  const auto& [grad_q, grad_k, grad_v] = *grads;
  return std::make_tuple(grad_q.contiguous(), grad_k.contiguous(), grad_v.contiguous());
}

}  // namespace mma_nmt::attention
