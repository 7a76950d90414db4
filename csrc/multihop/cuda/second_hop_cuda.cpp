// CUDA implementation of mma_nmt::multihop_second_hop and its backward: cuBLAS GEMMs around the CUDA head-gate kernel
// (second_hop_composition.h). On a GPU the projections are what cuBLAS does best, and the CPU kernel's reason to fuse
// them (the (B, H, T, ·) projections' trips through memory) is a small cost there. Plain C++.
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "multihop/second_hop_composition.h"

namespace mma_nmt::multihop::cuda {
namespace {

std::tuple<at::Tensor, at::Tensor, at::Tensor> multihop_second_hop_cuda(
    const at::Tensor& q, const at::Tensor& a, const at::Tensor& w_b, const at::Tensor& u_b,
    const std::optional<at::Tensor>& u_c, const at::Tensor& v_b) {
  const c10::cuda::OptionalCUDAGuard guard(q.device());
  return multihop_second_hop_by_composition(q, a, w_b, u_b, u_c, v_b);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> multihop_second_hop_backward_cuda(
    const at::Tensor& grad_out, const std::optional<at::Tensor>& grad_gate, const at::Tensor& q, const at::Tensor& a,
    const at::Tensor& w_b, const at::Tensor& u_b, const std::optional<at::Tensor>& u_c, const at::Tensor& v_b,
    const at::Tensor& gate, const at::Tensor& hidden) {
  const c10::cuda::OptionalCUDAGuard guard(q.device());
  return multihop_second_hop_backward_by_composition(grad_out, grad_gate, q, a, w_b, u_b, u_c, v_b, gate, hidden);
}

}  // namespace

TORCH_LIBRARY_IMPL(mma_nmt, CUDA, m) {
  m.impl("multihop_second_hop", &multihop_second_hop_cuda);
  m.impl("multihop_second_hop_backward", &multihop_second_hop_backward_cuda);
}

}  // namespace mma_nmt::multihop::cuda
