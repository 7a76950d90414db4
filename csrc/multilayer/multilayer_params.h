// Sizes and options of one multi-layer attention call (SPEC section 3, MLMHA), validated once (multilayer_checks.cpp)
// and handed to a backend.
//
// The inputs are the per-layer projections as the module computes them: q_i (B, T, E), k_i (B, S, E) for the n layers,
// and v_j (B, S, Ev) for m = n value sets (or m = 1: values summed over layers, joint weights only). Head h of a
// projection is columns [h*D, (h+1)*D). The operator works on "fused heads", each an ordinary attention head whose rows
// are gathered from the projections:
//   joint weights:          H fused heads; head h's q/k row is [q_1 .. q_n] at head h (n*D values, so the logit is
//                           sum_i q_i k_i^T), its value row [v_1 .. v_m] at head h (m*Dv values);
//   layer-specific weights: n*H fused heads; head i*H + h is layer i's head h (D and Dv values).
// The output (B, T, sets*Ev) holds set j's context of head h in columns [j*Ev + h*Dv, j*Ev + (h+1)*Dv): the paper's
// concatenated contexts C = [c_1 .. c_sets] (sets = m for joint weights, n for layer-specific ones).
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>

#include "attention/attention_params.h"

namespace mma_nmt::multilayer {

struct MultilayerParams {
  int64_t batch = 0, query_len = 0, key_len = 0;
  int64_t layers = 0;      // n: q and k tensors
  int64_t value_sets = 0;  // m: v tensors
  int64_t num_heads = 0;   // H
  int64_t head_dim = 0;    // D = E / H
  int64_t value_head_dim = 0;  // Dv = Ev / H
  bool layer_specific = false;
  double scale = 1.0;
  bool has_key_lengths = false;

  int64_t fused_heads() const { return layer_specific ? layers * num_heads : num_heads; }
  // Projection tensors that make up one fused head's q/k row and its value row.
  int64_t key_segments() const { return layer_specific ? 1 : layers; }
  int64_t value_segments() const { return layer_specific ? 1 : value_sets; }
  int64_t output_sets() const { return layer_specific ? layers : value_sets; }
  int64_t embed_dim() const { return num_heads * head_dim; }
  int64_t value_embed_dim() const { return num_heads * value_head_dim; }
  // The ordinary attention problem of the fused heads: global heads, no dropout.
  attention::AttentionParams fused() const;
};

MultilayerParams check_multilayer_args(const char* op_name, at::TensorList q, at::TensorList k, at::TensorList v,
                                       const std::optional<at::Tensor>& key_lengths, int64_t num_heads, double scale,
                                       bool layer_specific);

// Checks what backward receives beyond forward's inputs: grad_out and out (B, T, sets*Ev), lse (B, fused heads, T),
// and probs (B, fused heads, T, S) when given.
void check_multilayer_backward_extras(const char* op_name, const MultilayerParams& p, const at::Tensor& q0,
                                      const at::Tensor& grad_out, const at::Tensor& out, const at::Tensor& lse,
                                      const std::optional<at::Tensor>& probs);

}  // namespace mma_nmt::multilayer
