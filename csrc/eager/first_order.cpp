#include "eager/first_order.h"

#include <ATen/core/grad_mode.h>
#include <pybind11/pybind11.h>
#include <torch/csrc/Exceptions.h>

#include <string>

namespace mma_nmt::eager {
namespace {

bool any_requires_grad(const torch::autograd::variable_list& tensors) {
  for (const auto& t : tensors) {
    if (t.defined() && t.requires_grad()) return true;
  }
  return false;
}

// Raises the Python exception mma_nmt.ops.first_order.HigherOrderGradientError from inside the autograd engine: a
// torch::python_error carrying it keeps its type through the engine, as an autograd.Function's own exception does
// (a c10::Error would reach Python as a plain RuntimeError).
[[noreturn]] void raise_higher_order_gradient_error(const std::string& message) {
  pybind11::gil_scoped_acquire gil;
  const pybind11::object type =
      pybind11::module_::import("mma_nmt.ops.first_order").attr("HigherOrderGradientError");
  PyErr_SetString(type.ptr(), message.c_str());
  python_error error;
  error.persist();
  throw error;
}

}  // namespace

void refuse_second_order(const char* op, const torch::autograd::variable_list& saved,
                         const torch::autograd::variable_list& grads) {
  if (!at::GradMode::is_enabled() || !(any_requires_grad(saved) || any_requires_grad(grads))) return;
  raise_higher_order_gradient_error(
      std::string(op) +
      ": second-order gradients (a backward with create_graph=True, gradgradcheck, hessian, a gradient penalty) are "
      "not implemented; its backward is differentiable only to first order. Use the plain-PyTorch reference "
      "(mma_nmt.reference) where higher derivatives are needed");
}

}  // namespace mma_nmt::eager
