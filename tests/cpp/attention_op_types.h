// The typed signatures of mma_nmt::attention and mma_nmt::attention_backward, for the tests that call the CPU kernel
// through the dispatcher.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>
#include <tuple>

namespace mma_nmt::testing {

using AttentionTriple = std::tuple<at::Tensor, at::Tensor, at::Tensor>;
using AttentionFn = AttentionTriple(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                    const std::optional<at::Tensor>&, at::IntArrayRef, int64_t, double, int64_t, double,
                                    int64_t, bool, bool);
using AttentionBackwardFn = AttentionTriple(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                            const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                            const std::optional<at::Tensor>&, at::IntArrayRef, int64_t, double, int64_t,
                                            double, int64_t, bool);

}  // namespace mma_nmt::testing
