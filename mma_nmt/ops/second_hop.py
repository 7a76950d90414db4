"""``mma_nmt::multihop_second_hop``: the whole second hop of multi-hop attention (SPEC section 4), its projections
included, as one operator.

From each head's query slice ``q_h`` and first-hop output ``a_h`` (``D`` values each), per query position:

    e_h = v_b . tanh(W_b q_h + U_b_h a_h),   gate = softmax over heads of e,   out_h = gate_h * U_c_h a_h

or ``out_h = gate_h * a_h`` without ``u_c`` (the module then folds ``U_c`` into its output projection). On the CPU the
projections are products on blocks of positions in cache (``csrc/multihop/cpu/second_hop_kernel.h``): the
(B, H, T, ·) projections of :func:`mma_nmt.ops.multihop_gate`'s interface never go through memory. The operator also
returns ``hidden = tanh(W_b q_h + U_b_h a_h)``, which backward (``mma_nmt::multihop_second_hop_backward``) reads instead
of recomputing two products. On CUDA the projections are cuBLAS GEMMs around the head-gate kernel of
``mma_nmt::multihop_gate``. ``out`` and ``hidden`` are stored position-major on the CPU, (B, T, H, ·) in memory, so
that merging the heads afterwards is a view; ``grad_out`` may have any strides.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from mma_nmt.ops.device_checks import check_same_device
from mma_nmt.ops.fake_layout import contiguous_like, position_major, projection_gradient_like
from mma_nmt.ops.registration import backward_operator, register_operator

_BACKWARD_OP = backward_operator("multihop_second_hop")


class SecondHopResult(NamedTuple):
    out: torch.Tensor  # (B, H, T, Dc) gate_h * U_c_h a_h (or gate_h * a_h without u_c)
    gate: torch.Tensor  # (B, H, T) head-gate weights; they sum to one over heads (dim 1)


def multihop_second_hop(q: torch.Tensor, a: torch.Tensor, w_b: torch.Tensor, u_b: torch.Tensor,
                        u_c: torch.Tensor | None, v_b: torch.Tensor) -> SecondHopResult:
    """The second hop over the ``H`` heads at every (sentence, position).

    Args:
        q: (B, H, T, D) each head's query slice (e.g. a head view of the (B, T, E) query projection).
        a: (B, H, T, D) the first hop's output.
        w_b: (Db, D) shared by the heads; u_b: (H, Db, D) per head; v_b: (Db,).
        u_c: (H, Dc, D) per head, or None for ``out_h = gate_h * a_h``.

    ``q`` and ``a`` are read through their strides (only the last dimension must be contiguous on the CPU).
    """
    out, gate, _ = _OPERATOR(q, a, w_b, u_b, u_c, v_b)
    return SecondHopResult(out, gate)


def _second_hop_fake(q, a, w_b, u_b, u_c, v_b):
    check_same_device("mma_nmt.multihop_second_hop", "q", q, a=a, w_b=w_b, u_b=u_b, u_c=u_c, v_b=v_b)
    torch._check(q.dim() == 4 and w_b.dim() == 2, lambda: "q must be (batch, heads, query_len, head_dim), w_b 2-d")
    batch, heads, query_len, head_dim = q.shape
    value_dim = head_dim if u_c is None else u_c.shape[1]
    return (position_major(q, value_dim), q.new_empty((batch, heads, query_len)), position_major(q, w_b.shape[0]))


def _second_hop_backward_fake(grad_out, grad_gate, q, a, w_b, u_b, u_c, v_b, gate, hidden):
    check_same_device("mma_nmt.multihop_second_hop_backward", "q", q, grad_out=grad_out, grad_gate=grad_gate, a=a,
                      w_b=w_b, u_b=u_b, u_c=u_c, v_b=v_b, gate=gate, hidden=hidden)
    grad_u_c = q.new_empty((0,)) if u_c is None else contiguous_like(u_c)
    return (projection_gradient_like(q), projection_gradient_like(a), contiguous_like(w_b), contiguous_like(u_b),
            grad_u_c, contiguous_like(v_b))


def _setup_context(ctx, inputs, output):
    q, a, w_b, u_b, u_c, v_b = inputs
    _, gate, hidden = output
    ctx.has_u_c = u_c is not None
    ctx.mark_non_differentiable(hidden)  # backward's input, not a result to differentiate
    ctx.save_for_backward(q, a, w_b, u_b, u_c, v_b, gate, hidden)


def _backward(ctx, grad_out, grad_gate, _grad_hidden):
    q, a, w_b, u_b, u_c, v_b, gate, hidden = ctx.saved_tensors
    if grad_out is None:
        grad_out = q.new_zeros(gate.shape + (u_c.shape[1] if ctx.has_u_c else q.shape[3],))
    grad_q, grad_a, grad_w_b, grad_u_b, grad_u_c, grad_v_b = _BACKWARD_OP(grad_out, grad_gate, q, a, w_b, u_b, u_c,
                                                                          v_b, gate, hidden)
    return grad_q, grad_a, grad_w_b, grad_u_b, (grad_u_c if ctx.has_u_c else None), grad_v_b


_OPERATOR = register_operator("multihop_second_hop", fake=_second_hop_fake, backward_fake=_second_hop_backward_fake,
                              setup_context=_setup_context, backward=_backward,
                              native_eager="multihop_second_hop_with_autograd", weights=("w_b", "u_b", "u_c", "v_b"))
