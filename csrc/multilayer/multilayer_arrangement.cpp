#include "multilayer/multilayer_arrangement.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include "multilayer/multilayer_params.h"

namespace mma_nmt::multilayer {
namespace {

using Triple = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

// n projections (B, L, H*D) -> the fused heads' layout: (B, H, L, n*D) for joint weights, (B, n*H, L, D) for
// layer-specific ones.
at::Tensor arrange(at::TensorList xs, int64_t heads, bool layer_specific) {
  std::vector<at::Tensor> views;
  for (const at::Tensor& x : xs) {
    views.push_back(x.view({x.size(0), x.size(1), heads, x.size(2) / heads}).transpose(1, 2));  // (B, H, L, D)
  }
  if (layer_specific) return at::stack(views, 1).flatten(1, 2);  // (B, n, H, L, D) -> (B, n*H, L, D)
  return at::stack(views, 3).flatten(3);                          // (B, H, L, n, D) -> (B, H, L, n*D)
}

// The inverse of arrange for `sets` tensors: n x (B, L, H*D).
std::vector<at::Tensor> split(const at::Tensor& fused, int64_t sets, int64_t heads, bool layer_specific) {
  const int64_t batch = fused.size(0), len = fused.size(2), dim = layer_specific ? fused.size(3) : fused.size(3) / sets;
  const at::Tensor pieces = layer_specific ? fused.view({batch, sets, heads, len, dim})   // (B, n, H, L, D)
                                           : fused.view({batch, heads, len, sets, dim});  // (B, H, L, n, D)
  std::vector<at::Tensor> out;
  for (int64_t i = 0; i < sets; ++i) {
    const at::Tensor piece = pieces.select(layer_specific ? 1 : 3, i);   // (B, H, L, D)
    out.push_back(piece.transpose(1, 2).reshape({batch, len, heads * dim}));  // (B, L, H*D)
  }
  return out;
}

// (B, T, sets*Ev) concatenated contexts <-> the fused output (B, heads', T, value row).
at::Tensor fused_output(const at::Tensor& concatenated, int64_t sets, int64_t heads, bool layer_specific) {
  std::vector<at::Tensor> pieces;  // the sets' column blocks (B, T, Ev); chunk() would merge empty ones
  const int64_t width = concatenated.size(2) / sets;
  for (int64_t j = 0; j < sets; ++j) pieces.push_back(concatenated.narrow(2, j * width, width));
  return arrange(pieces, heads, layer_specific);
}
at::Tensor concatenated_output(const at::Tensor& fused, int64_t sets, int64_t heads, bool layer_specific) {
  return at::cat(split(fused, sets, heads, layer_specific), -1);
}

Triple call_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                      const std::optional<at::Tensor>& key_lengths, at::IntArrayRef kinds, double scale,
                      bool return_probs) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("mma_nmt::attention", "")
                             .typed<Triple(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                           const std::optional<at::Tensor>&, at::IntArrayRef, int64_t, double, int64_t,
                                           double, int64_t, bool, bool)>();
  return op.call(q, k, v, key_lengths, kinds, 0, scale, 0, 0.0, 0, return_probs, /*self_attention=*/false);
}

Triple call_attention_backward(const at::Tensor& grad_out, const at::Tensor& q, const at::Tensor& k,
                               const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse,
                               const std::optional<at::Tensor>& key_lengths, at::IntArrayRef kinds, double scale) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("mma_nmt::attention_backward", "")
          .typed<Triple(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                        const at::Tensor&, const std::optional<at::Tensor>&, at::IntArrayRef, int64_t, double, int64_t,
                        double, int64_t, bool)>();
  return op.call(grad_out, q, k, v, out, lse, key_lengths, kinds, 0, scale, 0, 0.0, 0, /*self_attention=*/false);
}

}  // namespace

Triple multilayer_attention_by_arrangement(at::TensorList q, at::TensorList k, at::TensorList v,
                                           const std::optional<at::Tensor>& key_lengths, int64_t num_heads,
                                           double scale, bool layer_specific, bool return_probs) {
  const MultilayerParams p = check_multilayer_args("mma_nmt.multilayer_attention", q, k, v, key_lengths, num_heads,
                                                   scale, layer_specific);
  const attention::AttentionParams fused = p.fused();
  auto [out, lse, probs] =
      call_attention(arrange(q, num_heads, layer_specific), arrange(k, num_heads, layer_specific),
                     arrange(v, num_heads, layer_specific), key_lengths, fused.head_kinds, scale, return_probs);
  return {concatenated_output(out, p.output_sets(), num_heads, layer_specific), lse, probs};
}

std::tuple<std::vector<at::Tensor>, std::vector<at::Tensor>, std::vector<at::Tensor>>
multilayer_attention_backward_by_arrangement(const at::Tensor& grad_out, at::TensorList q, at::TensorList k,
                                             at::TensorList v, const at::Tensor& out, const at::Tensor& lse,
                                             const std::optional<at::Tensor>& probs,
                                             const std::optional<at::Tensor>& key_lengths, int64_t num_heads,
                                             double scale, bool layer_specific) {
  const char* op = "mma_nmt.multilayer_attention_backward";
  const MultilayerParams p = check_multilayer_args(op, q, k, v, key_lengths, num_heads, scale, layer_specific);
  check_multilayer_backward_extras(op, p, q[0], grad_out, out, lse, probs);  // probs: not needed, recomputed
  const int64_t sets = p.output_sets();
  auto [grad_q, grad_k, grad_v] = call_attention_backward(
      fused_output(grad_out, sets, num_heads, layer_specific), arrange(q, num_heads, layer_specific),
      arrange(k, num_heads, layer_specific), arrange(v, num_heads, layer_specific),
      fused_output(out, sets, num_heads, layer_specific), lse, key_lengths, p.fused().head_kinds, scale);
  return {split(grad_q, p.layers, num_heads, layer_specific), split(grad_k, p.layers, num_heads, layer_specific),
          split(grad_v, p.value_sets, num_heads, layer_specific)};
}

}  // namespace mma_nmt::multilayer
