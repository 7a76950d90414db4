// The incoming gradient of an output as the backward operators take it: the CPU kernels read it through its strides
// (only the last dimension has to be contiguous, and they copy it where it is not), the CUDA ones want it contiguous.
#pragma once

#include <ATen/core/Tensor.h>

namespace mma_nmt::eager {

inline at::Tensor kernel_grad_out(const at::Tensor& grad_out) {
  return grad_out.device().is_cpu() ? grad_out : grad_out.contiguous();
}

}  // namespace mma_nmt::eager
