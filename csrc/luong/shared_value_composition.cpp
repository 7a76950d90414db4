#include "luong/shared_value_composition.h"

#include <ATen/ATen.h>
#include <ATen/OpMathType.h>

#include <limits>

#include "common/key_padding.h"

namespace mma_nmt::luong {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

// q k^T * scale (B, H, T, S) in the accumulation type (float for half inputs), -inf at the padding keys (`padding`:
// keys_past_sentence's (B, 1, 1, S) mask, undefined without key lengths).
at::Tensor masked_logits(const SharedValueParams& p, const at::Tensor& q, const at::Tensor& k,
                         const at::Tensor& padding) {
  const at::ScalarType acc = at::toOpMathType(q.scalar_type());
  at::Tensor logits = at::matmul(q.to(acc), k.to(acc).transpose(-1, -2)).mul_(p.scale);  // (B, H, T, S)
  if (padding.defined()) logits.masked_fill_(padding, -kInfinity);
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
  const at::Tensor padding = padding_mask(key_lengths, p.key_len);  // (B, 1, 1, S), undefined without padding
  const at::Tensor keys = without_padding_keys(k, padding), values = without_padding_keys(v, padding);
  const at::Tensor logits = masked_logits(p, q, keys, padding);
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
    const at::Tensor& v, const at::Tensor& /*out*/, const at::Tensor& lse,
    const std::optional<at::Tensor>& key_lengths) {
  // Five batched GEMMs in the inputs' dtype (cuBLAS accumulates half-precision products in float) around the softmax
  // gradient in the accumulation type; no operand is upcast (issue 49 point 3). The softmax backward is torch's own
  // kernel, P * (dP - rowsum(P dP)), whose rowsum cancels dP exactly where one key takes the whole weight.
  const int64_t batch = p.batch, heads = p.heads, rows = p.query_len, keys = p.key_len;
  const at::ScalarType dtype = q.scalar_type();
  const at::Tensor padding = padding_mask(key_lengths, keys);  // (B, 1, 1, S), undefined without padding
  // Zeroed padding keys: grad_q sums grad_logit (0 there) times the key, and 0 * NaN would be NaN.
  const at::Tensor key_rows = without_padding_keys(k, padding);                           // (B, H, S, D)
  const at::Tensor q3 = q.reshape({batch * heads, rows, p.head_dim});                      // (B*H, T, D)
  const at::Tensor k3 = key_rows.reshape({batch * heads, keys, p.head_dim});               // (B*H, S, D)
  const at::Tensor dout3 = grad_out.reshape({batch, heads * rows, p.value_dim});           // (B, H*T, Dv)
  // P = exp(scale * q k^T - lse) in the accumulation type (lse's), 0 at padding keys and in rows without keys.
  const at::Tensor logits = at::bmm(q3, k3.transpose(1, 2)).view({batch, heads, rows, keys});  // (B, H, T, S)
  at::Tensor probs = at::add(lse.neg().unsqueeze(-1), logits, p.scale).exp_();
  // scale * dP = scale * dO V^T, the values shared by the heads: one GEMM per sentence over all its heads' rows, the
  // logits' scale as its alpha (the softmax backward is linear in dP), so that no pass over the gradient applies it.
  const at::Tensor no_input = at::empty({1, 1, 1}, v.options());  // ignored: beta 0
  at::Tensor grad_probs = at::baddbmm(no_input, dout3, v.transpose(1, 2), /*beta=*/0, /*alpha=*/p.scale)
                              .view({batch, heads, rows, keys});  // (B, H, T, S)
  if (padding.defined()) {  // a padding key's weight is 0; its logit and dP may be anything (NaN behind the padding)
    probs.masked_fill_(padding, 0.0);
    grad_probs.masked_fill_(padding, 0.0);
  }
  // In the accumulation type, then cast to the inputs' dtype for the GEMMs (nothing in float32/float64). Not by
  // the kernel's input_dtype argument: CUDA's takes float16 there but refuses bfloat16.
  const at::Tensor grad_logits =
      at::_softmax_backward_data(grad_probs.to(probs.scalar_type()), probs, -1, probs.scalar_type())
          .to(dtype)
          .view({batch * heads, rows, keys});  // (B*H, T, S)
  const at::Tensor grad_q = at::bmm(grad_logits, k3);                  // (B*H, T, S) @ (B*H, S, D)
  const at::Tensor grad_k = at::bmm(grad_logits.transpose(1, 2), q3);  // (B*H, S, T) @ (B*H, T, D)
  // grad_v = sum over heads of P^T dO: (B, S, H*T) @ (B, H*T, Dv)
  const at::Tensor grad_v = at::bmm(probs.to(dtype).view({batch, heads * rows, keys}).transpose(1, 2), dout3);
  return {grad_q.view(q.sizes()), grad_k.view(k.sizes()), grad_v};
}

}  // namespace mma_nmt::luong
