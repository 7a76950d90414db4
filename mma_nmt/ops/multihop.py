"""``mma_nmt::multihop_gate``: the second hop of multi-hop attention (SPEC section 4) as one fused operator.

Per query position, with ``query_proj[h] = W_b q_h`` and ``head_proj[h] = U_b_h a_h`` (``Db`` values each) and
``value_proj[h] = U_c_h a_h`` (``Dc`` values), all produced by GEMMs outside the operator:

    e_h = v_b . tanh(query_proj[h] + head_proj[h]),   gate = softmax over heads of e,   out_h = gate_h * value_proj[h]

The kernels (``csrc/multihop/``) do the non-GEMM work in one pass; backward recomputes the tanh instead of storing
it and is the ``mma_nmt::multihop_gate_backward`` operator. On the CPU ``out`` is stored position-major, (B, T, H, ·) in
memory: merging the heads afterwards is a view. The projections' gradients are laid out like the projections
(``empty_like``; position-major where that would not leave the last dimension contiguous), so that autograd hands them
on without copies: the projection GEMMs around the operator and contiguous leaves take them as they are. ``grad_out``
may have any strides (a loss like ``out.sum()`` hands over an expanded one).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from mma_nmt.ops.device_checks import check_same_device
from mma_nmt.ops.fake_layout import contiguous_like, position_major, projection_gradient_like
from mma_nmt.ops.registration import backward_operator, register_operator

_BACKWARD_OP = backward_operator("multihop_gate")


class HeadGateResult(NamedTuple):
    out: torch.Tensor  # (B, H, T, Dc) gate-weighted value projections
    gate: torch.Tensor  # (B, H, T) head-gate weights; they sum to one over heads (dim 1)


def multihop_gate(query_proj: torch.Tensor, head_proj: torch.Tensor, value_proj: torch.Tensor,
                  v_b: torch.Tensor) -> HeadGateResult:
    """Second hop over the ``H`` heads at every (sentence, position), in the first hop's ``(B, H, T, ·)`` layout.

    Args:
        query_proj: (B, H, T, Db) ``W_b q_h`` for each head's query slice ``q_h``.
        head_proj: (B, H, T, Db) ``U_b_h a_h`` for each head's first-hop output ``a_h``.
        value_proj: (B, H, T, Dc) ``U_c_h a_h``.
        v_b: (Db,) the MLP attention's output vector.

    The CPU kernels read ``query_proj``, ``head_proj`` and ``value_proj`` through their strides (only the last dimension
    must be contiguous), so slices and transposed views of larger projections are not copied.
    """
    out, gate = _OPERATOR(query_proj, head_proj, value_proj, v_b)
    return HeadGateResult(out, gate)


def _multihop_gate_fake(query_proj, head_proj, value_proj, v_b):
    check_same_device("mma_nmt.multihop_gate", "query_proj", query_proj, head_proj=head_proj, value_proj=value_proj,
                      v_b=v_b)
    torch._check(query_proj.dim() == 4 and value_proj.dim() == 4,
                 lambda: "query_proj and value_proj must be (batch, heads, query_len, dim)")
    batch, heads, query_len, _ = query_proj.shape
    out = position_major(query_proj, value_proj.shape[3])
    return out, query_proj.new_empty((batch, heads, query_len))


def _multihop_gate_backward_fake(grad_out, grad_gate, query_proj, head_proj, value_proj, v_b, gate):
    check_same_device("mma_nmt.multihop_gate_backward", "query_proj", query_proj, grad_out=grad_out,
                      grad_gate=grad_gate, head_proj=head_proj, value_proj=value_proj, v_b=v_b, gate=gate)
    return projection_gradient_like(query_proj), projection_gradient_like(value_proj), contiguous_like(v_b)


def _setup_context(ctx, inputs, output):
    query_proj, head_proj, value_proj, v_b = inputs
    _, gate = output
    ctx.save_for_backward(query_proj, head_proj, value_proj, v_b, gate)


def _backward(ctx, grad_out, grad_gate):
    query_proj, head_proj, value_proj, v_b, gate = ctx.saved_tensors
    if grad_out is None:
        grad_out = torch.zeros_like(value_proj)
    grad_pre, grad_value_proj, grad_v_b = _BACKWARD_OP(grad_out, grad_gate, query_proj, head_proj, value_proj, v_b,
                                                       gate)
    # d(query_proj + head_proj) reaches both summands unchanged
    return grad_pre, grad_pre, grad_value_proj, grad_v_b


_OPERATOR = register_operator("multihop_gate", fake=_multihop_gate_fake, backward_fake=_multihop_gate_backward_fake,
                              setup_context=_setup_context, backward=_backward,
                              native_eager="multihop_gate_with_autograd", weights=("v_b",))
