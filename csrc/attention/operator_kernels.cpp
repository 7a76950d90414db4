#include "attention/operator_kernels.h"

#include <ATen/core/dispatch/Dispatcher.h>

#include <cstdint>
#include <optional>

namespace mma_nmt::attention {
namespace {

using OptionalTensor = std::optional<at::Tensor>;

AttentionTriple forward_by_operator(const AttentionParams& p, const at::Tensor& q, const at::Tensor& k,
                                    const at::Tensor& v, const OptionalTensor& key_lengths) {
  static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("mma_nmt::attention", "").typed<AttentionTriple(
      const at::Tensor&, const at::Tensor&, const at::Tensor&, const OptionalTensor&, at::IntArrayRef, int64_t, double,
      int64_t, double, int64_t, bool, bool)>();
  return op.call(q, k, v, key_lengths, p.head_kinds, p.window, p.scale, p.query_offset, p.dropout_p,
                 static_cast<int64_t>(p.seed), /*return_probs=*/false, p.self_attention);
}

AttentionTriple backward_by_operator(const AttentionParams& p, const at::Tensor& grad_out, const at::Tensor& q,
                                     const at::Tensor& k, const at::Tensor& v, const at::Tensor& out,
                                     const at::Tensor& lse, const OptionalTensor& key_lengths) {
  static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("mma_nmt::attention_backward", "").typed<
      AttentionTriple(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                      const at::Tensor&, const OptionalTensor&, at::IntArrayRef, int64_t, double, int64_t, double,
                      int64_t, bool)>();
  return op.call(grad_out, q, k, v, out, lse, key_lengths, p.head_kinds, p.window, p.scale, p.query_offset,
                 p.dropout_p, static_cast<int64_t>(p.seed), p.self_attention);
}

}  // namespace

AttentionKernels dispatched_attention_kernels() { return {&forward_by_operator, &backward_by_operator}; }

}  // namespace mma_nmt::attention
