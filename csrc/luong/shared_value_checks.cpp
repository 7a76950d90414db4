#include <ATen/ATen.h>

#include "common/checks.h"
#include "luong/shared_value_params.h"

namespace mma_nmt::luong {

SharedValueParams check_shared_value_args(const char* op, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                          const std::optional<at::Tensor>& key_lengths, double scale) {
  SharedValueParams p;
  static_cast<AttentionSizes&>(p) = check_query_key_value(op, q, k, v, ValueLayout::kSharedByHeads);
  TORCH_CHECK_VALUE(scale > 0.0 && std::isfinite(scale), op, ": scale must be positive and finite, got ", scale);
  if (key_lengths.has_value()) check_key_lengths(op, *key_lengths, q, p.key_len);
  p.scale = scale;
  return p;
}

void check_shared_value_backward_extras(const char* op, const SharedValueParams& p, const at::Tensor& q,
                                        const at::Tensor& grad_out, const at::Tensor& out, const at::Tensor& lse) {
  check_backward_extras(op, p, q, grad_out, out, lse, stats_dtype(q.scalar_type()));
}

}  // namespace mma_nmt::luong
