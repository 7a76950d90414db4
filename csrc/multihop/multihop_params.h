// Sizes of one second-hop (head gate) call, validated once (multihop_checks.cpp) and handed to a backend kernel.
#pragma once

#include <cstdint>
#include <optional>

#include <ATen/core/Tensor.h>

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

}  // namespace mma_nmt::multihop
