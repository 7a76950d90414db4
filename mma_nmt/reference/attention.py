"""Plain-PyTorch attention with per-head mask kinds, written straight from SPEC section 1. It builds the (T, S) masks
the fused operator avoids, and is the ground truth of the tests and the ``implementation="reference"`` path of modules."""

from __future__ import annotations

import math
from typing import Sequence

import torch

from mma_nmt.ops.head_spec import HeadKind
from mma_nmt.reference.dropout_hash import dropout_keep_mask


def visibility_mask(
    head_kinds: Sequence[int],
    query_len: int,
    key_len: int,
    *,
    window: int,
    query_offset: int = 0,
    key_lengths: torch.Tensor | None = None,
    batch: int = 1,
    device=None,
) -> torch.Tensor:
    """(B, H, T, S) bool: True where query i of head h may see key j (SPEC section 1 plus key padding)."""
    i = torch.arange(query_len, device=device).view(-1, 1) + query_offset  # (T, 1) query positions
    j = torch.arange(key_len, device=device).view(1, -1)  # (1, S)
    by_kind = {
        HeadKind.GLOBAL: torch.ones(query_len, key_len, dtype=torch.bool, device=device),
        HeadKind.LOCAL: (i - j).abs() <= window,
        HeadKind.FORWARD: j >= i,
        HeadKind.BACKWARD: j <= i,
        HeadKind.CAUSAL: j <= i,
    }
    heads = torch.stack([by_kind[HeadKind(k)] for k in head_kinds]) if len(head_kinds) else \
        torch.zeros(0, query_len, key_len, dtype=torch.bool, device=device)  # (H, T, S)
    mask = heads.unsqueeze(0).expand(batch, -1, -1, -1)  # (B, H, T, S)
    if key_lengths is not None:
        real = j.view(1, 1, 1, -1) < key_lengths.to(device).view(-1, 1, 1, 1)  # (B, 1, 1, S)
        mask = mask & real
    return mask


def attention_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    head_kinds: Sequence[int],
    key_lengths: torch.Tensor | None = None,
    window: int = 1,
    scale: float | None = None,
    query_offset: int = 0,
    dropout_p: float = 0.0,
    seed: int = 0,
    logit_bias: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns ``(out (B, H, T, Dv), probs (B, H, T, S))``; a query with no visible key gets zero weights and output.

    ``logit_bias``: a float tensor broadcastable to (B, H, T, S) added to the scaled logits, ``-inf`` hiding a key
    (``nn.MultiheadAttention``'s float masks; :mod:`mma_nmt.modules.torch_masks`); None adds nothing."""
    batch, heads, query_len, head_dim = q.shape
    key_len = k.shape[2]
    if scale is None:
        scale = 1.0 / math.sqrt(head_dim) if head_dim > 0 else 1.0
    visible = visibility_mask(head_kinds, query_len, key_len, window=window, query_offset=query_offset,
                              key_lengths=key_lengths, batch=batch, device=q.device)
    logits = torch.matmul(q, k.transpose(-1, -2)) * scale  # (B, H, T, S)
    if logit_bias is not None:
        logits = logits + logit_bias
        visible = visible & ~torch.isneginf(logit_bias)  # (B, H, T, S)
    logits = logits.masked_fill(~visible, float("-inf"))
    has_key = visible.any(dim=-1, keepdim=True)  # (B, H, T, 1)
    logits = torch.where(has_key, logits, torch.zeros_like(logits))  # keeps softmax finite on fully masked rows
    probs = torch.softmax(logits, dim=-1) * visible
    weights = probs
    if dropout_p > 0:
        keep = dropout_keep_mask(seed, (batch, heads, query_len, key_len), dropout_p, device=q.device)
        weights = probs * keep / (1.0 - dropout_p)
    return torch.matmul(weights, v), probs
