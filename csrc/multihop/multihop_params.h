// Sizes of one second-hop (head gate) call, validated once (multihop_checks.cpp) and handed to a backend kernel.
#pragma once

#include <cstdint>
#include <optional>

#include <ATen/core/Tensor.h>

#include "common/checks.h"
#include "common/tensors.h"

namespace mma_nmt::multihop {

struct HeadGateParams {
  int64_t batch = 0;      // B
  int64_t heads = 0;      // H
  int64_t query_len = 0;  // T: positions per sentence
  int64_t hop_dim = 0;    // Db: size of the MLP attention's hidden layer
  int64_t value_dim = 0;  // Dc: size of U_c_h a_h
  int64_t positions() const { return batch * query_len; }
};

// Checks query_proj (B, H, T, Db), head_proj (B, H, T, Db), value_proj (B, H, T, Dc) and v_b (Db,) — the layout of
// the first hop's output — and names the bad argument.
HeadGateParams check_head_gate_args(const char* op, const at::Tensor& query_proj, const at::Tensor& head_proj,
                                    const at::Tensor& value_proj, const at::Tensor& v_b);

// Checks what backward receives beyond forward's inputs: grad_out (B, H, T, Dc), grad_gate (B, H, T) if
// given, gate (B, H, T).
void check_head_gate_backward_extras(const char* op, const HeadGateParams& p, const at::Tensor& query_proj,
                                     const at::Tensor& grad_out, const std::optional<at::Tensor>& grad_gate,
                                     const at::Tensor& gate);

// Sizes of one call of the whole second hop with its projections (mma_nmt::multihop_second_hop).
struct SecondHopParams {
  int64_t batch = 0;      // B
  int64_t heads = 0;      // H
  int64_t query_len = 0;  // T: positions per sentence
  int64_t head_dim = 0;   // D: size of q_h and a_h
  int64_t hop_dim = 0;    // Db: rows of W_b and U_b_h
  int64_t value_dim = 0;  // Dc: rows of U_c_h; D when u_c is absent (the output is then beta_h a_h)
  bool project_values = true;  // u_c given
  int64_t positions() const { return batch * query_len; }
};

// Checks q and a (B, H, T, D), w_b (Db, D), u_b (H, Db, D), u_c (H, Dc, D) if given and v_b (Db,), and names the bad
// argument.
SecondHopParams check_second_hop_args(const char* op, const at::Tensor& q, const at::Tensor& a, const at::Tensor& w_b,
                                      const at::Tensor& u_b, const std::optional<at::Tensor>& u_c,
                                      const at::Tensor& v_b);

// Checks every argument of the backward op: forward's (check_second_hop_args) and grad_out (B, H, T, Dc), grad_gate
// (B, H, T) if given, gate (B, H, T) and hidden (B, H, T, Db). Returns the sizes.
SecondHopParams check_second_hop_backward_args(const char* op, const at::Tensor& grad_out,
                                               const std::optional<at::Tensor>& grad_gate, const at::Tensor& q,
                                               const at::Tensor& a, const at::Tensor& w_b, const at::Tensor& u_b,
                                               const std::optional<at::Tensor>& u_c, const at::Tensor& v_b,
                                               const at::Tensor& gate, const at::Tensor& hidden);

}  // namespace mma_nmt::multihop
