"""The second hop's per-head projections ``U_b_h a_h`` and ``U_c_h a_h`` (SPEC section 4) as two batched GEMMs over
heads that share their input, with a backward that adds both GEMMs' contributions to the input's gradient in one
buffer (``baddbmm_``) instead of letting autograd allocate two (H, B*T, D) gradients and sum them."""

from __future__ import annotations

import torch


class _PerHeadProjections(torch.autograd.Function):
    @staticmethod
    def forward(per_head: torch.Tensor, u_b: torch.Tensor, u_c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.bmm(per_head, u_b.transpose(1, 2)), torch.bmm(per_head, u_c.transpose(1, 2))

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx, grad_b: torch.Tensor, grad_c: torch.Tensor):
        per_head, u_b, u_c = ctx.saved_tensors
        grad_per_head = grad_u_b = grad_u_c = None
        if ctx.needs_input_grad[0]:
            grad_per_head = torch.bmm(grad_b, u_b).baddbmm_(grad_c, u_c)  # (H, N, D)
        if ctx.needs_input_grad[1]:
            grad_u_b = torch.bmm(grad_b.transpose(1, 2), per_head)  # (H, Db, D)
        if ctx.needs_input_grad[2]:
            grad_u_c = torch.bmm(grad_c.transpose(1, 2), per_head)  # (H, Dc, D)
        return grad_per_head, grad_u_b, grad_u_c


def per_head_projections(per_head: torch.Tensor, u_b: torch.Tensor,
                         u_c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(U_b_h x_h, U_c_h x_h)`` for every head ``h`` and row ``x_h`` of ``per_head``.

    Args:
        per_head: (H, N, D) each head's inputs (N = B*T positions).
        u_b: (H, Db, D); u_c: (H, Dc, D).
    Returns ``((H, N, Db), (H, N, Dc))``.
    """
    return _PerHeadProjections.apply(per_head, u_b, u_c)
