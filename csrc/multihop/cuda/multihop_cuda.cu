// CUDA implementation of mma_nmt::multihop_gate, mma_nmt::multihop_second_hop and their backwards: argument checks and
// the device guard, then the kernels of head_gate_kernels.cuh (with the second hop's GEMMs around them,
// second_hop_launch.cuh) on the current stream.
#include "multihop/cuda/second_hop_launch.cuh"  // first: it includes common/cuda_compat.h

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

std::tuple<at::Tensor, at::Tensor, at::Tensor> multihop_second_hop_cuda(
    const at::Tensor& q, const at::Tensor& a, const at::Tensor& w_b, const at::Tensor& u_b,
    const std::optional<at::Tensor>& u_c, const at::Tensor& v_b) {
  const SecondHopParams p = check_second_hop_args("mma_nmt.multihop_second_hop", q, a, w_b, u_b, u_c, v_b);
  const c10::cuda::CUDAGuard guard(q.device());
  return run_second_hop_forward(p, q, a, w_b, u_b, u_c, v_b, gpu::current_launch());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> multihop_second_hop_backward_cuda(
    const at::Tensor& grad_out, const std::optional<at::Tensor>& grad_gate, const at::Tensor& q, const at::Tensor& a,
    const at::Tensor& w_b, const at::Tensor& u_b, const std::optional<at::Tensor>& u_c, const at::Tensor& v_b,
    const at::Tensor& gate, const at::Tensor& hidden) {
  const char* op = "mma_nmt.multihop_second_hop_backward";
  const SecondHopParams p =
      check_second_hop_backward_args(op, grad_out, grad_gate, q, a, w_b, u_b, u_c, v_b, gate, hidden);
  const c10::cuda::CUDAGuard guard(q.device());
  return run_second_hop_backward(p, grad_out, grad_gate, q, a, w_b, u_b, u_c, v_b, gate, hidden,
                                 gpu::current_launch());
}

}  // namespace

TORCH_LIBRARY_IMPL(mma_nmt, CUDA, m) {
  m.impl("multihop_gate", &multihop_gate_cuda);
  m.impl("multihop_gate_backward", &multihop_gate_backward_cuda);
  m.impl("multihop_second_hop", &multihop_second_hop_cuda);
  m.impl("multihop_second_hop_backward", &multihop_second_hop_backward_cuda);
}

}  // namespace mma_nmt::multihop::cuda
