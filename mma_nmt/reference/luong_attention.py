"""Plain-PyTorch multi-head Luong attention, straight from SPEC section 2 (ground truth of the tests and the
``implementation="reference"`` path of :class:`mma_nmt.modules.LuongMultiheadAttention`)."""

from __future__ import annotations

import torch

from mma_nmt.reference.masked_softmax import masked_softmax


def shared_value_attention_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *,
                                     key_lengths: torch.Tensor | None = None,
                                     scale: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """The formula of ``mma_nmt::shared_value_attention``: q (B, H, T, D), k (B, H, S, D), v (B, S, Dv).

    Returns ``(out (B, H, T, Dv), probs (B, H, T, S))``.
    """
    (batch, heads, steps, _), (src_len, value_dim) = q.shape, v.shape[1:]
    logits = torch.matmul(q, k.transpose(-1, -2)) * scale  # (B, H, T, S)
    probs = masked_softmax(logits, key_lengths)
    # every head reads the same values: (B, H*T, S) @ (B, S, Dv), not v broadcast (and copied) to (B, H, S, Dv)
    out = torch.bmm(probs.reshape(batch, heads * steps, src_len), v)  # (B, H*T, Dv)
    return out.view(batch, heads, steps, value_dim), probs


def luong_attention_reference(h_t: torch.Tensor, hs: torch.Tensor, w_sc: torch.Tensor, w_sm: torch.Tensor,
                              w_fd: torch.Tensor, *, key_lengths: torch.Tensor | None = None
                              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One decoder step of the paper's attention layer, head by head.

    Args:
        h_t: (B, dh) decoder state. hs: (B, S, dh) encoder states.
        w_sc: (h, dh, dh) per-head score matrices (``e_s = h_t^T W_sc_i hs_s``).
        w_sm: (h, d_sm/h, 2*dh) and w_fd: (h, d_fd/h, 2*dh) per-head output matrices applied to ``[c_i; h_t]``.
    Returns ``(a_tilde (B, d_sm), a_bar (B, d_fd), alpha (B, h, S))``.
    """
    smooth, feed, alphas = [], [], []
    for i in range(w_sc.shape[0]):
        scores = torch.einsum("bd,de,bse->bs", h_t, w_sc[i], hs)  # (B, S)
        alpha = masked_softmax(scores, key_lengths)
        context = torch.einsum("bs,bsd->bd", alpha, hs)  # (B, dh)
        joined = torch.cat([context, h_t], dim=-1)  # (B, 2 dh)
        smooth.append(torch.tanh(joined @ w_sm[i].T))
        feed.append(torch.tanh(joined @ w_fd[i].T))
        alphas.append(alpha)
    return torch.cat(smooth, dim=-1), torch.cat(feed, dim=-1), torch.stack(alphas, dim=1)
