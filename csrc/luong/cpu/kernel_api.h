// The CPU shared-value attention kernels are compiled once per instruction set (shared_value_kernel.h, one
// generated source per build); luong_cpu.cpp picks the best one the running processor supports (common/cpu_isa.h).
#pragma once

#include <ATen/core/Tensor.h>

#include "common/cpu_isa.h"
#include "luong/shared_value_params.h"

namespace mma_nmt::luong::cpu {

// Contiguous tensors: q (B, H, T, D), k (B, H, S, D), v (B, S, Dv); out (B, H, T, Dv), lse (B, H, T),
// probs (B, H, T, S).
struct SharedValueForward {
  at::Tensor q, k, v, key_lengths;  // key_lengths undefined without padding
  at::Tensor out, lse, probs;       // probs undefined unless asked for (then zero-initialised)
};

struct SharedValueBackward {
  at::Tensor grad_out, q, k, v, out, lse, key_lengths;
  at::Tensor grad_q;          // zero-initialised by the caller
  at::Tensor grad_k, grad_v;  // uninitialised; the kernel zeroes each slice before adding to it
};

MMA_NMT_DECLARE_FOR_EACH_ISA(
    void shared_value_forward(const SharedValueParams& p, SharedValueForward& t);
    void shared_value_backward(const SharedValueParams& p, SharedValueBackward& t);)

}  // namespace mma_nmt::luong::cpu
