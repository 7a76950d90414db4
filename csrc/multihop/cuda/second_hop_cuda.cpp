// CUDA implementation of mma_nmt::multihop_second_hop and its backward. Plain C++: the projections are cuBLAS GEMMs
// (at::matmul), the gate is the head-gate kernel of mma_nmt::multihop_gate (multihop_cuda.cu). On a GPU the GEMMs are
// what cuBLAS does best, and the CPU's reason to fuse them (the (B, H, T, ·) projections' trips through memory) is a
// small cost there. Backward recomputes the two pre-activation products rather than read `hidden`, because the
// head-gate backward kernel takes them as its inputs.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <tuple>

#include "multihop/cuda/head_gate_cuda.h"
#include "multihop/multihop_params.h"

namespace mma_nmt::multihop::cuda {
namespace {

struct Projections {
  at::Tensor query, head, value;  // W_b q_h, U_b_h a_h (B, H, T, Db); U_c_h a_h (B, H, T, Dc), or a without u_c
};

Projections project(const at::Tensor& q, const at::Tensor& a, const at::Tensor& w_b, const at::Tensor& u_b,
                    const std::optional<at::Tensor>& u_c) {
  return {at::matmul(q, w_b.t()),             // (B, H, T, D) @ (D, Db)
          at::matmul(a, u_b.transpose(1, 2)),  // (B, H, T, D) @ (H, D, Db), broadcast over B
          u_c.has_value() ? at::matmul(a, u_c->transpose(1, 2)) : a};
}

void check_cuda(const char* op, const at::Tensor& q) {
  TORCH_CHECK_VALUE(q.is_cuda(), op, ": expected CUDA tensors, got q on ", q.device());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> multihop_second_hop_cuda(
    const at::Tensor& q, const at::Tensor& a, const at::Tensor& w_b, const at::Tensor& u_b,
    const std::optional<at::Tensor>& u_c, const at::Tensor& v_b) {
  const char* op = "mma_nmt.multihop_second_hop";
  check_second_hop_args(op, q, a, w_b, u_b, u_c, v_b);
  check_cuda(op, q);
  const c10::cuda::CUDAGuard guard(q.device());
  const Projections proj = project(q, a, w_b, u_b, u_c);
  auto [out, gate] = multihop_gate_cuda(proj.query, proj.head, proj.value, v_b);
  return {out, gate, at::tanh(proj.query + proj.head)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> multihop_second_hop_backward_cuda(
    const at::Tensor& grad_out, const std::optional<at::Tensor>& grad_gate, const at::Tensor& q, const at::Tensor& a,
    const at::Tensor& w_b, const at::Tensor& u_b, const std::optional<at::Tensor>& u_c, const at::Tensor& v_b,
    const at::Tensor& gate, const at::Tensor& hidden) {
  const char* op = "mma_nmt.multihop_second_hop_backward";
  const SecondHopParams p = check_second_hop_args(op, q, a, w_b, u_b, u_c, v_b);
  check_second_hop_backward_extras(op, p, q, grad_out, grad_gate, gate, hidden);
  check_cuda(op, q);
  const c10::cuda::CUDAGuard guard(q.device());
  const Projections proj = project(q, a, w_b, u_b, u_c);
  auto [grad_pre, grad_value, grad_v_b] =  // (B, H, T, Db), (B, H, T, Dc), (Db,)
      multihop_gate_backward_cuda(grad_out, grad_gate, proj.query, proj.head, proj.value, v_b, gate);
  at::Tensor grad_a = at::matmul(grad_pre, u_b);  // (B, H, T, Db) @ (H, Db, D)
  grad_a = u_c.has_value() ? grad_a + at::matmul(grad_value, *u_c) : grad_a + grad_value;
  return {at::matmul(grad_pre, w_b),  // grad_q (B, H, T, D)
          grad_a,
          at::einsum("bhte,bhtd->ed", {grad_pre, q}).contiguous(),   // grad_w_b (Db, D)
          at::einsum("bhte,bhtd->hed", {grad_pre, a}).contiguous(),  // grad_u_b (H, Db, D)
          u_c.has_value() ? at::einsum("bhtc,bhtd->hcd", {grad_value, a}).contiguous() : at::empty({0}, q.options()),
          grad_v_b};
}

}  // namespace

TORCH_LIBRARY_IMPL(mma_nmt, CUDA, m) {
  m.impl("multihop_second_hop", &multihop_second_hop_cuda);
  m.impl("multihop_second_hop_backward", &multihop_second_hop_backward_cuda);
}

}  // namespace mma_nmt::multihop::cuda
