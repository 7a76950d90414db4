// The CPU kernels of the second hop are compiled once per instruction set (head_gate_kernel.h and
// second_hop_kernel.h, one generated source per build); multihop_cpu.cpp picks the best one the running processor
// supports (common/cpu_isa.h).
#pragma once

#include <ATen/core/Tensor.h>

#include "common/cpu_isa.h"
#include "multihop/multihop_params.h"

namespace mma_nmt::multihop::cpu {

// Shapes as in multihop_params.h. query_proj, head_proj, value_proj and the (B, H, T, dim) results (out, grad_pre,
// grad_value_proj) need only a contiguous last dimension; grad_out may have any strides; gate, grad_gate and v_b are
// contiguous.
struct HeadGateForward {
  at::Tensor query_proj, head_proj, value_proj, v_b;
  at::Tensor out, gate;  // (B, H, T, Dc), (B, H, T)
};

struct HeadGateBackward {
  at::Tensor grad_out, grad_gate, query_proj, head_proj, value_proj, v_b, gate;  // grad_gate undefined when absent
  at::Tensor grad_pre, grad_value_proj, grad_v_b;  // (B, H, T, Db), (B, H, T, Dc), (Db,)
};

// The whole second hop with its projections (mma_nmt::multihop_second_hop), second_hop_kernel.h. q and a need only a
// contiguous last dimension; w_b, u_b, u_c (undefined when absent) and v_b are contiguous. hidden = tanh(W_b q_h +
// U_b_h a_h), which backward reads instead of recomputing the pre-activation's products. grad_out may have any strides.
struct SecondHopForward {
  at::Tensor q, a, w_b, u_b, u_c, v_b;
  at::Tensor out, gate, hidden;  // (B, H, T, Dc), (B, H, T), (B, H, T, Db)
};

struct SecondHopBackward {
  at::Tensor grad_out, grad_gate, q, a, w_b, u_b, u_c, v_b, gate, hidden;  // grad_gate undefined when absent
  at::Tensor grad_q, grad_a;                                               // (B, H, T, D)
  at::Tensor grad_w_b, grad_u_b, grad_u_c, grad_v_b;  // grad_u_c undefined without u_c
};

MMA_NMT_DECLARE_FOR_EACH_ISA(
    void head_gate_forward(const HeadGateParams& p, HeadGateForward& t);
    void head_gate_backward(const HeadGateParams& p, HeadGateBackward& t);
    void second_hop_forward(const SecondHopParams& p, SecondHopForward& t);
    void second_hop_backward(const SecondHopParams& p, SecondHopBackward& t);)

}  // namespace mma_nmt::multihop::cpu
