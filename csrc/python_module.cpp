// The Python extension mma_nmt._C. Importing it loads this library, which registers every operator; the module itself
// reports how it was built, so that mma_nmt can explain a mismatch with the installed torch, and holds the C++ autograd
// of the eager fast path (csrc/eager/, called by mma_nmt/ops/registration.py).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/Exceptions.h>
#include <torch/python.h>
#include <torch/version.h>

#include "common/cpu_isa.h"
#include "eager/operators.h"

namespace py = pybind11;

namespace {

// `f` as torch's own bindings call an operator: without the GIL while it runs, a c10 error raised as the Python
// exception torch raises for it (ValueError, TypeError, ...: the operators' argument checks, without a C++ backtrace),
// and a TORCH_WARN as a Python warning.
template <typename Result, typename... Args>
auto as_torch_binding(Result (*f)(Args...)) {
  return [f](Args... args) -> Result {
    HANDLE_TH_ERRORS
    py::gil_scoped_release no_gil;
    return f(std::forward<Args>(args)...);
    END_HANDLE_TH_ERRORS_PYBIND
  };
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "mma_nmt native operators (registered under torch.ops.mma_nmt)";
  m.def("build_info", [] {
    py::dict info;
#ifdef MMA_NMT_WITH_CUDA
    info["cuda"] = true;
#else
    info["cuda"] = false;
#endif
    info["torch_version"] = TORCH_VERSION;
    info["cpu_kernel"] = mma_nmt::cpu::isa_name(mma_nmt::cpu::best_isa());
    return info;
  });
  m.def("attention_with_autograd", as_torch_binding(&mma_nmt::eager::attention_with_autograd),
        "mma_nmt::attention with its autograd in C++ (the eager fast path; the schema's arguments, all of them)");
  m.def("shared_value_attention_with_autograd",
        as_torch_binding(&mma_nmt::eager::shared_value_attention_with_autograd),
        "mma_nmt::shared_value_attention with its autograd in C++ (as attention_with_autograd)");
  m.def("gmm_attention_with_autograd", as_torch_binding(&mma_nmt::eager::gmm_attention_with_autograd),
        "mma_nmt::gmm_attention with its autograd in C++ (as attention_with_autograd)");
  m.def("multihop_gate_with_autograd", as_torch_binding(&mma_nmt::eager::multihop_gate_with_autograd),
        "mma_nmt::multihop_gate with its autograd in C++ (as attention_with_autograd)");
  m.def("multihop_second_hop_with_autograd", as_torch_binding(&mma_nmt::eager::multihop_second_hop_with_autograd),
        "mma_nmt::multihop_second_hop with its autograd in C++ (as attention_with_autograd)");
  m.def("multilayer_attention_with_autograd", as_torch_binding(&mma_nmt::eager::multilayer_attention_with_autograd),
        "mma_nmt::multilayer_attention with its autograd in C++ (as attention_with_autograd; lists for Tensor[])");
}
