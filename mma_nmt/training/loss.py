"""Label-smoothed cross-entropy."""

from __future__ import annotations

import torch
from torch.nn import functional as F


def label_smoothed_cross_entropy(logits: torch.Tensor, target: torch.Tensor, *, epsilon: float,
                                 ignore_index: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed losses over the non-ignored target tokens.

    logits (B, T, V), target (B, T). The smoothed target puts ``1 - epsilon`` on the reference token and spreads
    ``epsilon`` uniformly over the whole vocabulary. Returns ``(loss, nll)``, both summed (divide by the token count).
    """
    log_probs = F.log_softmax(logits.float(), dim=-1).view(-1, logits.shape[-1])  # (B*T, V)
    flat = target.reshape(-1)
    keep = flat != ignore_index
    nll = -log_probs.gather(1, flat.clamp(min=0).unsqueeze(1)).squeeze(1)  # (B*T,)
    uniform = -log_probs.mean(dim=-1)  # (B*T,)
    nll = nll.masked_fill(~keep, 0.0).sum()
    uniform = uniform.masked_fill(~keep, 0.0).sum()
    return (1.0 - epsilon) * nll + epsilon * uniform, nll
