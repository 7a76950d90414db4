// save_for_backward takes tensors only, so the eager autograd Functions save an absent optional argument (or a
// gradient that was never given) as an undefined tensor; optional_tensor reads it back as the operators take it.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>

namespace mma_nmt::eager {

inline std::optional<at::Tensor> optional_tensor(const at::Tensor& t) {
  return t.defined() ? std::optional<at::Tensor>(t) : std::nullopt;
}

}  // namespace mma_nmt::eager
