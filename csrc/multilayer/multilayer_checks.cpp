#include "multilayer/multilayer_params.h"

#include <ATen/ATen.h>

#include <cmath>
#include <string>

#include "attention/attention_outputs.h"
#include "attention/head_mask.h"

namespace mma_nmt::multilayer {
namespace {

std::string item(const char* list, size_t index) { return std::string(list) + "[" + std::to_string(index) + "]"; }

}  // namespace

attention::AttentionParams MultilayerParams::fused() const {
  attention::AttentionParams p;
  p.batch = batch;
  p.heads = fused_heads();
  p.query_len = query_len;
  p.key_len = key_len;
  p.head_dim = key_segments() * head_dim;
  p.value_dim = value_segments() * value_head_dim;
  p.head_kinds.assign(p.heads, static_cast<int64_t>(attention::kGlobal));
  p.scale = scale;
  p.has_key_lengths = has_key_lengths;
  return p;
}

MultilayerParams check_multilayer_args(const char* op, at::TensorList q, at::TensorList k, at::TensorList v,
                                       const std::optional<at::Tensor>& key_lengths, int64_t num_heads, double scale,
                                       bool layer_specific) {
  TORCH_CHECK_VALUE(!q.empty(), op, ": q must hold one tensor per encoder layer, got none");
  TORCH_CHECK_VALUE(k.size() == q.size(), op, ": k must hold one tensor per layer like q (", q.size(), "), got ",
                    k.size());
  TORCH_CHECK_VALUE(v.size() == q.size() || (v.size() == 1 && !layer_specific), op,
                    ": v must hold one tensor per layer like q (", q.size(), ")",
                    layer_specific ? "" : ", or one (values summed over layers, joint weights only)", ", got ",
                    v.size());
  TORCH_CHECK_VALUE(num_heads >= 1, op, ": num_heads must be >= 1, got ", num_heads);
  TORCH_CHECK_VALUE(scale > 0.0 && std::isfinite(scale), op, ": scale must be positive and finite, got ", scale);
  const at::Tensor& q0 = q[0];
  check_rank(op, "q[0]", q0, 3, "(batch, query_len, embed_dim)");
  check_rank(op, "k[0]", k[0], 3, "(batch, key_len, embed_dim)");
  check_rank(op, "v[0]", v[0], 3, "(batch, key_len, value_embed_dim)");
  TORCH_CHECK_TYPE(at::isFloatingType(q0.scalar_type()), op, ": q[0] must be a floating-point tensor, got ",
                   q0.scalar_type());
  MultilayerParams p;
  p.batch = q0.size(0);
  p.query_len = q0.size(1);
  p.key_len = k[0].size(1);
  p.layers = static_cast<int64_t>(q.size());
  p.value_sets = static_cast<int64_t>(v.size());
  p.num_heads = num_heads;
  p.layer_specific = layer_specific;
  p.scale = scale;
  const int64_t embed = q0.size(2), value_embed = v[0].size(2);
  TORCH_CHECK_VALUE(embed % num_heads == 0, op, ": q[0]'s embed_dim (", embed, ") must be divisible by num_heads (",
                    num_heads, ")");
  TORCH_CHECK_VALUE(value_embed % num_heads == 0, op, ": v[0]'s value_embed_dim (", value_embed,
                    ") must be divisible by num_heads (", num_heads, ")");
  p.head_dim = embed / num_heads;
  p.value_head_dim = value_embed / num_heads;
  for (size_t i = 0; i < q.size(); ++i) {
    check_same_layout(op, item("q", i).c_str(), q[i], {p.batch, p.query_len, embed}, q0, "q[0]");
    check_same_layout(op, item("k", i).c_str(), k[i], {p.batch, p.key_len, embed}, q0, "q[0]");
  }
  for (size_t j = 0; j < v.size(); ++j) {
    check_same_layout(op, item("v", j).c_str(), v[j], {p.batch, p.key_len, value_embed}, q0, "q[0]");
  }
  if (key_lengths.has_value()) check_key_lengths(op, *key_lengths, q0, p.key_len);
  p.has_key_lengths = key_lengths.has_value();
  return p;
}

void check_multilayer_backward_extras(const char* op, const MultilayerParams& p, const at::Tensor& q0,
                                      const at::Tensor& grad_out, const at::Tensor& out, const at::Tensor& lse,
                                      const std::optional<at::Tensor>& probs) {
  const int64_t width = p.output_sets() * p.value_embed_dim();
  check_same_layout(op, "grad_out", grad_out, {p.batch, p.query_len, width}, q0, "q[0]");
  check_same_layout(op, "out", out, {p.batch, p.query_len, width}, q0, "q[0]");
  check_lse(op, lse, {p.batch, p.fused_heads(), p.query_len}, "(batch, fused heads, query_len)",
                       stats_dtype(q0.scalar_type()), q0, "q[0]");
  if (probs.has_value()) {
    check_same_layout(op, "probs", *probs, {p.batch, p.fused_heads(), p.query_len, p.key_len}, q0, "q[0]");
  }
}

}  // namespace mma_nmt::multilayer
