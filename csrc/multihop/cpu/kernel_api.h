// The CPU head-gate kernels are compiled once per instruction set (head_gate_kernel_<isa>.cpp); multihop_cpu.cpp picks
// the best one the running processor supports (common/cpu_isa.h).
#pragma once

#include <ATen/core/Tensor.h>

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

#define MMA_NMT_DECLARE_CPU_HEAD_GATE(isa)                                 \
  namespace isa {                                                          \
  void head_gate_forward(const HeadGateParams& p, HeadGateForward& t);     \
  void head_gate_backward(const HeadGateParams& p, HeadGateBackward& t);   \
  }

MMA_NMT_DECLARE_CPU_HEAD_GATE(isa_default)
MMA_NMT_DECLARE_CPU_HEAD_GATE(isa_avx2)
MMA_NMT_DECLARE_CPU_HEAD_GATE(isa_avx512)

#undef MMA_NMT_DECLARE_CPU_HEAD_GATE

}  // namespace mma_nmt::multihop::cpu
