// The Python extension mma_nmt._C. Importing it loads this library, which registers every operator; the module itself
// only reports how it was built, so that mma_nmt can explain a mismatch with the installed torch.
#include <pybind11/pybind11.h>
#include <torch/version.h>

#include "common/cpu_isa.h"

namespace py = pybind11;

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
}
