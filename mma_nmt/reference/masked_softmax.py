"""Softmax over source positions with right padding given as lengths, shared by the plain-PyTorch references."""

from __future__ import annotations

import torch


def masked_softmax(logits: torch.Tensor, key_lengths: torch.Tensor | None) -> torch.Tensor:
    """Softmax over the last dim (S) of (B, ..., S) logits, keys ``s >= key_lengths[b]`` excluded; all-zero rows for a
    sentence without keys."""
    if key_lengths is None:
        return torch.softmax(logits, dim=-1)
    positions = torch.arange(logits.shape[-1], device=logits.device)
    shape = (logits.shape[0],) + (1,) * (logits.dim() - 1)
    visible = positions < key_lengths.to(logits.device).view(shape)  # (B, 1.., S)
    logits = logits.masked_fill(~visible, float("-inf"))
    logits = torch.where(visible.any(-1, keepdim=True), logits, torch.zeros_like(logits))
    return torch.softmax(logits, dim=-1) * visible
