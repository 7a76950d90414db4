// The guard of mma_nmt/ops/first_order.py (`first_order_only`) for the C++ backward of the eager fast path: a backward
// run with create_graph=True (grad mode on inside it, and something it reads requires grad) raises the Python path's
// error (mma_nmt.ops.first_order.second_order_error, a HigherOrderGradientError) instead of returning gradients whose
// own gradient would silently be zero. Compiled into the Python extension only (it raises a Python exception).
#pragma once

#include <torch/csrc/autograd/variable.h>

namespace mma_nmt::eager {

// Raises HigherOrderGradientError naming `op` ("mma_nmt.attention") when grad mode is on and any of `saved` or
// `grads` requires grad.
void refuse_second_order(const char* op, const torch::autograd::variable_list& saved,
                         const torch::autograd::variable_list& grads);

}  // namespace mma_nmt::eager
