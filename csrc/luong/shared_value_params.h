// Sizes of one shared-value attention call (SPEC section 2: h per-head key sets, one value set shared by every head),
// validated once (shared_value_checks.cpp) and handed to a backend kernel.
#pragma once

#include <cstdint>
#include <optional>

#include <ATen/core/Tensor.h>

#include "common/checks.h"
#include "common/tensors.h"

namespace mma_nmt::luong {

// query_len is 1 per decoder step, or the target length when run over all steps; v is shared by the heads.
struct SharedValueParams : AttentionSizes {
  double scale = 1.0;
};

// Checks q (B, H, T, D), k (B, H, S, D), v (B, S, Dv), key_lengths (B,) and scale; names the offending argument.
SharedValueParams check_shared_value_args(const char* op, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                          const std::optional<at::Tensor>& key_lengths, double scale);

// Checks grad_out and out (B, H, T, Dv) and lse (B, H, T) of backward.
void check_shared_value_backward_extras(const char* op, const SharedValueParams& p, const at::Tensor& q,
                                        const at::Tensor& grad_out, const at::Tensor& out, const at::Tensor& lse);

}  // namespace mma_nmt::luong
