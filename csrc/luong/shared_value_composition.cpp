#include "luong/shared_value_composition.h"

#include <ATen/ATen.h>
#include <ATen/OpMathType.h>

#include <limits>

#include "common/key_padding.h"

namespace mma_nmt::luong {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

// q k^T * scale (B, H, T, S) in the accumulation type (float for half inputs), -inf past each sentence's
// key_lengths[b] keys.
at::Tensor masked_logits(const SharedValueParams& p, const at::Tensor& q, const at::Tensor& k,
                         const std::optional<at::Tensor>& key_lengths) {
  const at::ScalarType acc = at::toOpMathType(q.scalar_type());
  at::Tensor logits = at::matmul(q.to(acc), k.to(acc).transpose(-1, -2)).mul_(p.scale);  // (B, H, T, S)
  if (key_lengths.has_value()) {
    logits.masked_fill_(keys_past_sentence(*key_lengths, p.key_len), -kInfinity);
  }
  return logits;
}

// In place: logits -> exp(logit - lse), 0 at padding and in rows without keys (lse -inf, taken as 0 there, so every
// weight of the row is exp(-inf) = 0).
at::Tensor weights_from_lse(at::Tensor logits, const at::Tensor& lse) {
  const at::Tensor finite_lse = lse.to(logits.scalar_type()).masked_fill(at::isinf(lse), 0.0).unsqueeze(-1);
  return logits.sub_(finite_lse).exp_();  // (B, H, T, S)
}

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor> shared_value_forward_by_composition(
    const SharedValueParams& p, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const std::optional<at::Tensor>& key_lengths, bool return_probs) {
  const at::Tensor keys = without_padding_keys(k, key_lengths), values = without_padding_keys(v, key_lengths);
  const at::Tensor logits = masked_logits(p, q, keys, key_lengths);
  // logsumexp of a row of -inf is -inf: the contract for rows without keys.
  const at::Tensor lse = at::logsumexp(logits, -1);  // (B, H, T)
  const at::Tensor probs = weights_from_lse(logits, lse);
  // (B, H, T, S) @ (B, 1, S, Dv): the values are shared by the heads
  const at::Tensor out = at::matmul(probs, values.to(probs.scalar_type()).unsqueeze(1));
  return {out.to(q.scalar_type()).contiguous(), lse.to(stats_dtype(q.scalar_type())).contiguous(),
          return_probs ? probs.to(q.scalar_type()).contiguous() : at::empty({0}, q.options())};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> shared_value_backward_by_composition(
    const SharedValueParams& p, const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k,
    const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse, const std::optional<at::Tensor>& key_lengths) {
  const at::ScalarType acc = at::toOpMathType(q.scalar_type());
  const at::Tensor keys = without_padding_keys(k, key_lengths);
  const at::Tensor probs = weights_from_lse(masked_logits(p, q, keys, key_lengths), lse);  // (B, H, T, S)
  const at::Tensor dout = grad_out.to(acc);                                                // (B, H, T, Dv)
  const at::Tensor values = without_padding_keys(v, key_lengths).to(acc).unsqueeze(1);     // (B, 1, S, Dv)
  const at::Tensor delta = (dout * out.to(acc)).sum(-1, /*keepdim=*/true);   // (B, H, T, 1): dO . O
  const at::Tensor grad_logits = probs * (at::matmul(dout, values.transpose(-1, -2)) - delta) * p.scale;
  const at::Tensor grad_q = at::matmul(grad_logits, keys.to(acc));                // (B, H, T, S) @ (B, H, S, D)
  const at::Tensor grad_k = at::matmul(grad_logits.transpose(-1, -2), q.to(acc));  // (B, H, S, T) @ (B, H, T, D)
  const at::Tensor grad_v = at::matmul(probs.transpose(-1, -2), dout).sum(1);     // summed over heads: (B, S, Dv)
  const at::ScalarType dtype = q.scalar_type();
  return {grad_q.to(dtype).contiguous(), grad_k.to(dtype).contiguous(), grad_v.to(dtype).contiguous()};
}

}  // namespace mma_nmt::luong
