"""The whole second hop of multi-hop attention (SPEC section 4) — its three projections and ``mma_nmt::multihop_gate``
— as one autograd function that keeps every intermediate in the position-major layout (B, T, H, ·).

Why not plain autograd around the operator: the projections are small GEMMs (K = D = 64), so the copies that autograd
inserts around them cost as much as the gate itself — the (B, H, T) -> (H, B*T) copy of the head outputs for the
per-head GEMM, the transposed gradients made contiguous before each GEMM of backward, a zero-filled full-size gradient
per slice of a joint ``[U_b; U_c]`` projection, and the same ``grad_pre`` accumulated into two summands. Here:

* ``W_b q_h`` is one GEMM on the (B*T*H, D) rows of ``q`` — a view when ``q`` is the head view of the (B, T, E) query
  projection, as in :class:`mma_nmt.modules.MultiHopSelfAttention`;
* ``[U_b_h; U_c_h] a_h`` is one batched GEMM over heads (output width Db + Dc) on a single (B, T, H, D) copy of the
  first hop's output, written straight into a (B, T, H, Db + Dc) buffer whose two column ranges the operator reads;
* backward takes the operator's position-major gradients as GEMM operands in place (no copies), and returns the
  gradient of ``q`` in the memory layout of the (B, T, E) query projection.
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from mma_nmt.ops.multihop import HeadGateResult

_OP = torch.ops.mma_nmt.multihop_gate
_BACKWARD_OP = torch.ops.mma_nmt.multihop_gate_backward


def _heads_first(rows: torch.Tensor, batch: int, length: int, heads: int) -> torch.Tensor:
    """(B, H, T, d) view of position-major (B, T, H, d) memory -> (H, B*T, d) view (a GEMM batch over heads)."""
    return rows.transpose(1, 2).reshape(batch * length, heads, rows.shape[-1]).transpose(0, 1)


class _SecondHop(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, a, w_b, u_b, u_c, v_b):
        batch, heads, length, dim = a.shape
        hop_dim, value_dim = w_b.shape[0], u_c.shape[1]
        q_rows = q.transpose(1, 2).reshape(batch * length * heads, dim)  # (B*T*H, D), a view for the module's q
        query_proj = (q_rows @ w_b.t()).view(batch, length, heads, hop_dim).transpose(1, 2)  # (B, H, T, Db)
        a_rows = a.transpose(1, 2).contiguous().view(batch * length, heads, dim)  # (B*T, H, D): the one copy
        weight = torch.cat((u_b, u_c), dim=1)  # (H, Db + Dc, D)
        proj = a.new_empty(batch * length, heads, hop_dim + value_dim)  # (B*T, H, Db + Dc)
        torch.bmm(a_rows.transpose(0, 1), weight.transpose(1, 2), out=proj.transpose(0, 1))  # per head, in place
        proj = proj.view(batch, length, heads, -1).transpose(1, 2)  # (B, H, T, Db + Dc) view
        head_proj, value_proj = proj[..., :hop_dim], proj[..., hop_dim:]
        out, gate = _OP(query_proj, head_proj, value_proj, v_b)
        ctx.save_for_backward(q_rows, a_rows, w_b, u_b, u_c, v_b, query_proj, head_proj, value_proj, gate)
        ctx.shape = (batch, heads, length, dim)
        return out, gate

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out, grad_gate):
        q_rows, a_rows, w_b, u_b, u_c, v_b, query_proj, head_proj, value_proj, gate = ctx.saved_tensors
        batch, heads, length, dim = ctx.shape
        if grad_out is None:
            grad_out = torch.zeros_like(value_proj)
        grad_pre, grad_value, grad_v_b = _BACKWARD_OP(grad_out, grad_gate, query_proj, head_proj, value_proj, v_b,
                                                      gate)
        # grad_pre is the gradient of both query_proj and head_proj (they are summed)
        grad_q = grad_a = grad_w_b = grad_u_b = grad_u_c = None
        pre_rows = grad_pre.transpose(1, 2).reshape(batch * length * heads, -1)  # (B*T*H, Db), a view on the CPU
        if ctx.needs_input_grad[0]:
            grad_q = (pre_rows @ w_b).view(batch, length, heads, dim).transpose(1, 2)  # (B, H, T, D) view
        if ctx.needs_input_grad[2]:
            grad_w_b = pre_rows.t() @ q_rows  # (Db, D)
        pre_heads = _heads_first(grad_pre, batch, length, heads)  # (H, B*T, Db)
        value_heads = _heads_first(grad_value, batch, length, heads)  # (H, B*T, Dc)
        if ctx.needs_input_grad[1]:
            grad_rows = a_rows.new_empty(a_rows.shape)  # (B*T, H, D)
            per_head = grad_rows.transpose(0, 1)  # (H, B*T, D) view
            torch.bmm(pre_heads, u_b, out=per_head)
            per_head.baddbmm_(value_heads, u_c)
            grad_a = grad_rows.view(batch, length, heads, dim).transpose(1, 2)  # (B, H, T, D) view
        a_heads = a_rows.transpose(0, 1)  # (H, B*T, D)
        if ctx.needs_input_grad[3]:
            grad_u_b = torch.bmm(pre_heads.transpose(1, 2), a_heads)  # (H, Db, D)
        if ctx.needs_input_grad[4]:
            grad_u_c = torch.bmm(value_heads.transpose(1, 2), a_heads)  # (H, Dc, D)
        return grad_q, grad_a, grad_w_b, grad_u_b, grad_u_c, (grad_v_b if ctx.needs_input_grad[5] else None)


def second_hop(q: torch.Tensor, a: torch.Tensor, w_b: torch.Tensor, u_b: torch.Tensor, u_c: torch.Tensor,
               v_b: torch.Tensor) -> HeadGateResult:
    """``a'_h = beta_h U_c_h a_h`` with ``beta = softmax_h(v_b . tanh(W_b q_h + U_b_h a_h))``.

    Args:
        q: (B, H, T, D) each head's query slice; a: (B, H, T, D) first-hop outputs.
        w_b: (Db, D); u_b: (H, Db, D); u_c: (H, Dc, D); v_b: (Db,).
    Returns ``(a' (B, H, T, Dc), beta (B, H, T))`` as :func:`mma_nmt.reference.second_hop_reference`; on the CPU ``a'``
    is a view of (B, T, H, Dc) memory, so merging its heads costs nothing.
    """
    for name, t, rank in (("q", q, 4), ("a", a, 4), ("w_b", w_b, 2), ("u_b", u_b, 3), ("u_c", u_c, 3), ("v_b", v_b, 1)):
        if t.dim() != rank:
            raise ValueError(f"second_hop: {name} must be a {rank}-d tensor, got shape {tuple(t.shape)}")
    batch, heads, length, dim = a.shape
    if tuple(q.shape) != tuple(a.shape):
        raise ValueError(f"second_hop: q must have the shape of a {tuple(a.shape)}, got {tuple(q.shape)}")
    hop_dim = w_b.shape[0]
    if w_b.shape[1] != dim or tuple(u_b.shape) != (heads, hop_dim, dim) or u_c.shape[0] != heads \
            or u_c.shape[2] != dim or tuple(v_b.shape) != (hop_dim,):
        raise ValueError(f"second_hop: with H={heads}, D={dim}, Db={hop_dim} expected u_b (H, Db, D), u_c (H, Dc, D) "
                         f"and v_b (Db,), got {tuple(u_b.shape)}, {tuple(u_c.shape)}, {tuple(v_b.shape)}")
    out, gate = _SecondHop.apply(q, a, w_b, u_b, u_c, v_b)
    return HeadGateResult(out, gate)
