#include "eager/first_order.h"

#include <ATen/core/grad_mode.h>
#include <pybind11/pybind11.h>
#include <torch/csrc/Exceptions.h>

namespace mma_nmt::eager {
namespace {

bool any_requires_grad(const torch::autograd::variable_list& tensors) {
  for (const auto& t : tensors) {
    if (t.defined() && t.requires_grad()) return true;
  }
  return false;
}

// Raises mma_nmt.ops.first_order.second_order_error(op), the Python path's exception, from inside the autograd engine:
// a torch::python_error carrying it keeps its type through the engine, as an autograd.Function's own exception does
// (a c10::Error would reach Python as a plain RuntimeError).
[[noreturn]] void raise_second_order_error(const char* op) {
  pybind11::gil_scoped_acquire gil;
  const pybind11::object error = pybind11::module_::import("mma_nmt.ops.first_order").attr("second_order_error")(op);
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(error.ptr())), error.ptr());
  python_error raised;
  raised.persist();
  throw raised;
}

}  // namespace

void refuse_second_order(const char* op, const torch::autograd::variable_list& saved,
                         const torch::autograd::variable_list& grads) {
  if (!at::GradMode::is_enabled() || !(any_requires_grad(saved) || any_requires_grad(grads))) return;
  raise_second_order_error(op);
}

}  // namespace mma_nmt::eager
