// mma_nmt::multihop_second_hop by composition: the projections as GEMMs (at::matmul), the head gate as the
// mma_nmt::multihop_gate operator between them. It is the CUDA backend (cuda/second_hop_cuda.cpp: cuBLAS GEMMs around
// the CUDA head-gate kernel); it is compiled on every build, so that the CPU tests (tests/cpp/test_second_hop_op.cpp)
// check it against the CPU kernel.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>
#include <tuple>

namespace mma_nmt::multihop {

// (out, gate, hidden) as mma_nmt::multihop_second_hop, laid out as the CPU kernel lays them out: out and hidden
// position-major, gate (B, H, T) contiguous (common/head_layout.h).
std::tuple<at::Tensor, at::Tensor, at::Tensor> multihop_second_hop_by_composition(
    const at::Tensor& q, const at::Tensor& a, const at::Tensor& w_b, const at::Tensor& u_b,
    const std::optional<at::Tensor>& u_c, const at::Tensor& v_b);

// (grad_q, grad_a, grad_w_b, grad_u_b, grad_u_c (empty without u_c), grad_v_b) as
// mma_nmt::multihop_second_hop_backward, grad_q and grad_a laid out like q and a (gradient_like), the weights'
// contiguous. Recomputes the two pre-activation products rather than read `hidden`: the
// head-gate backward takes them as its inputs.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
multihop_second_hop_backward_by_composition(const at::Tensor& grad_out, const std::optional<at::Tensor>& grad_gate,
                                            const at::Tensor& q, const at::Tensor& a, const at::Tensor& w_b,
                                            const at::Tensor& u_b, const std::optional<at::Tensor>& u_c,
                                            const at::Tensor& v_b, const at::Tensor& gate, const at::Tensor& hidden);

}  // namespace mma_nmt::multihop
