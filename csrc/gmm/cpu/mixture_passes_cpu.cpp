// The composition's mixture passes on CPU tensors (mixture_passes.h): one row per thread, rows split over torch's
// intra-op threads. What the CUDA kernels compute with a warp per row, so the composition's CPU tests run its
// arithmetic.
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/record_function.h>

#include <vector>

#include "gmm/mixture_passes.h"

namespace mma_nmt::gmm {
namespace {

void check_on_cpu(const MixtureInputs& in, const char* pass) {
  TORCH_CHECK(in.omega.device().is_cpu(), "mma_nmt GMM composition: the CPU mixture ", pass, " got tensors on ",
              in.omega.device());
}

MixtureForward forward_on_cpu(const GmmParams& p, const MixtureInputs& in) {
  check_on_cpu(in, "forward");
  RECORD_FUNCTION("mma_nmt::gmm_mixture_forward", std::vector<c10::IValue>());  // one kernel on the GPU
  MixtureForward out = allocate_mixture_forward(p, in);
  AT_DISPATCH_FLOATING_TYPES(in.omega.scalar_type(), "mma_nmt GMM mixture forward (CPU)", [&] {
    const MixtureCall<scalar_t> call = mixture_call<scalar_t>(p, in);
    scalar_t* beta = out.beta.data_ptr<scalar_t>();
    scalar_t* log_mass = out.log_mass.data_ptr<scalar_t>();
    at::parallel_for(0, call.rows, 1, [&](int64_t begin, int64_t end) {
      std::vector<Component<scalar_t>> comps(p.components);
      for (int64_t r = begin; r < end; ++r) {
        log_mass[r] = mixture_row_forward(call.row(r), comps.data(), SerialLanes{}, beta + r * p.key_len);
      }
    });
  });
  return out;
}

MixtureBackward backward_on_cpu(const GmmParams& p, const MixtureInputs& in, const at::Tensor& gate,
                                const at::Tensor& x) {
  check_on_cpu(in, "backward");
  RECORD_FUNCTION("mma_nmt::gmm_mixture_backward", std::vector<c10::IValue>());  // one kernel on the GPU
  MixtureBackward out = allocate_mixture_backward(p, in);
  AT_DISPATCH_FLOATING_TYPES(in.omega.scalar_type(), "mma_nmt GMM mixture backward (CPU)", [&] {
    const MixtureCall<scalar_t> call = mixture_call<scalar_t>(p, in);
    const MixtureRowGrads<scalar_t> grads = mixture_grads_out<scalar_t>(out);
    const scalar_t* gates = gate.data_ptr<scalar_t>();
    const scalar_t* dots = x.data_ptr<scalar_t>();
    scalar_t* beta = out.beta.data_ptr<scalar_t>();
    scalar_t* delta_b = out.delta_b.data_ptr<scalar_t>();
    at::parallel_for(0, call.rows, 1, [&](int64_t begin, int64_t end) {
      std::vector<Component<scalar_t>> comps(p.components);
      for (int64_t r = begin; r < end; ++r) {
        delta_b[r] = mixture_row_backward(call.row(r), comps.data(), SerialLanes{}, dots + r * p.key_len, gates[r],
                                          beta + r * p.key_len, grads.row(r, p.components));
      }
    });
  });
  return out;
}

}  // namespace

MixturePasses cpu_mixture_passes() { return {&forward_on_cpu, &backward_on_cpu}; }

}  // namespace mma_nmt::gmm
