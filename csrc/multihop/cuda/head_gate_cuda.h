// The CUDA head-gate operator (multihop_cuda.cu), callable from C++: mma_nmt::multihop_second_hop's CUDA path
// (second_hop_cuda.cpp) runs its projections as cuBLAS GEMMs around these kernels.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>
#include <tuple>

namespace mma_nmt::multihop::cuda {

// mma_nmt::multihop_gate: (out, gate) from query_proj, head_proj (B, H, T, Db), value_proj (B, H, T, Dc), v_b (Db,).
std::tuple<at::Tensor, at::Tensor> multihop_gate_cuda(const at::Tensor& query_proj, const at::Tensor& head_proj,
                                                      const at::Tensor& value_proj, const at::Tensor& v_b);

// mma_nmt::multihop_gate_backward: (grad_pre, grad_value_proj, grad_v_b).
std::tuple<at::Tensor, at::Tensor, at::Tensor> multihop_gate_backward_cuda(
    const at::Tensor& grad_out, const std::optional<at::Tensor>& grad_gate, const at::Tensor& query_proj,
    const at::Tensor& head_proj, const at::Tensor& value_proj, const at::Tensor& v_b, const at::Tensor& gate);

}  // namespace mma_nmt::multihop::cuda
