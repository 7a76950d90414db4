// CUDA implementation of mma_nmt::multihop_gate and its backward: argument checks and the device guard, then the
// kernels of head_gate_kernels.cuh on the current stream.
#include "multihop/cuda/head_gate_kernels.cuh"  // first: it includes common/cuda_compat.h

#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "common/cuda_launch.h"

namespace mma_nmt::multihop::cuda {
namespace {

std::tuple<at::Tensor, at::Tensor> multihop_gate_cuda(const at::Tensor& query_proj, const at::Tensor& head_proj,
                                                      const at::Tensor& value_proj, const at::Tensor& v_b) {
  const HeadGateParams p = check_head_gate_args("mma_nmt.multihop_gate", query_proj, head_proj, value_proj, v_b);
  const c10::cuda::CUDAGuard guard(query_proj.device());
  return run_head_gate_forward(p, query_proj, head_proj, value_proj, v_b, gpu::current_launch());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> multihop_gate_backward_cuda(
    const at::Tensor& grad_out, const std::optional<at::Tensor>& grad_gate, const at::Tensor& query_proj,
    const at::Tensor& head_proj, const at::Tensor& value_proj, const at::Tensor& v_b, const at::Tensor& gate) {
  const char* op = "mma_nmt.multihop_gate_backward";
  const HeadGateParams p = check_head_gate_args(op, query_proj, head_proj, value_proj, v_b);
  check_head_gate_backward_extras(op, p, query_proj, grad_out, grad_gate, gate);
  const c10::cuda::CUDAGuard guard(query_proj.device());
  return run_head_gate_backward(p, grad_out, grad_gate, query_proj, head_proj, value_proj, v_b, gate,
                                gpu::current_launch());
}

}  // namespace

TORCH_LIBRARY_IMPL(mma_nmt, CUDA, m) {
  m.impl("multihop_gate", &multihop_gate_cuda);
  m.impl("multihop_gate_backward", &multihop_gate_backward_cuda);
}

}  // namespace mma_nmt::multihop::cuda
