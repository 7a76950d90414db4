"""Plain-PyTorch second hop of multi-hop attention, written straight from SPEC section 4 (the ground truth of the tests
and the ``implementation="reference"`` path of :class:`mma_nmt.modules.MultiHopSelfAttention`)."""

from __future__ import annotations

import torch


def head_gate_reference(query_proj: torch.Tensor, head_proj: torch.Tensor, value_proj: torch.Tensor,
                        v_b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The formula of ``mma_nmt::multihop_gate`` on (B, H, T, Db), (B, H, T, Db), (B, H, T, Dc) and (Db,).

    Returns ``(out (B, H, T, Dc), gate (B, H, T))``.
    """
    e = torch.tanh(query_proj + head_proj) @ v_b  # (B, H, T)
    gate = torch.softmax(e, dim=1)  # over heads
    return gate.unsqueeze(-1) * value_proj, gate


def second_hop_reference(q: torch.Tensor, a: torch.Tensor, w_b: torch.Tensor, v_b: torch.Tensor, u_b: torch.Tensor,
                         u_c: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """``e_h = v_b^T tanh(W_b q_h + U_b_h a_h)``, ``beta = softmax_h(e)``, ``a'_h = beta_h U_c_h a_h`` (the formula of
    ``mma_nmt::multihop_second_hop``).

    Args:
        q: (B, H, T, D) each head's query slice.
        a: (B, H, T, D) first-hop outputs.
        w_b: (Db, D) shared; v_b: (Db,) shared; u_b: (H, Db, D) per head; u_c: (H, Dc, D) per head, or None for
            ``a'_h = beta_h a_h``.
    Returns ``(a' (B, H, T, Dc), beta (B, H, T))``.
    """
    query_proj = torch.einsum("bhtd,ed->bhte", q, w_b)  # (B, H, T, Db)
    head_proj = torch.einsum("bhtd,hed->bhte", a, u_b)  # (B, H, T, Db)
    value_proj = a if u_c is None else torch.einsum("bhtd,hcd->bhtc", a, u_c)  # (B, H, T, Dc)
    return head_gate_reference(query_proj, head_proj, value_proj, v_b)
