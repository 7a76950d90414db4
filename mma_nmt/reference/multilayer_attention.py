"""Plain-PyTorch multi-layer multi-head attention (MLMHA), straight from SPEC section 3: one logit matrix per encoder
layer, summed (joint weights) or softmaxed one by one (layer-specific weights). Ground truth of the tests and the
``implementation="reference"`` path of :class:`mma_nmt.modules.MultiLayerMultiheadAttention`."""

from __future__ import annotations

import math
from typing import Sequence

import torch

from mma_nmt.reference.masked_softmax import masked_softmax


def multilayer_attention_reference(q: Sequence[torch.Tensor], k: Sequence[torch.Tensor], v: Sequence[torch.Tensor], *,
                                   layer_specific: bool, sum_contexts: bool,
                                   key_lengths: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Context ``C`` of n layers before ``W_o``.

    Args:
        q, k, v: n tensors each, ``q_i`` (B, H, T, D), ``k_i`` and ``v_i`` (B, H, S, D), from layer i's projections.
        layer_specific: U0 (False: ``p = softmax(sum_i a_i)`` shared by all layers; True: ``softmax(a_i)`` per layer).
        sum_contexts: U1 (False: ``C = [c_1 .. c_n]``; True: ``C = sum_i c_i``).
        key_lengths: (B,) real source lengths.
    Returns ``(C (B, T, n*H*D) or (B, T, H*D), weights)``; weights are (B, H, T, S) for joint weights and
    (B, n, H, T, S) for layer-specific ones.
    """
    scale = 1.0 / math.sqrt(q[0].shape[-1])
    logits = [torch.matmul(qi, ki.transpose(-1, -2)) * scale for qi, ki in zip(q, k)]  # n x (B, H, T, S)
    if layer_specific:
        probs = [masked_softmax(a, key_lengths) for a in logits]
        weights = torch.stack(probs, dim=1)
    else:
        joint = masked_softmax(sum(logits), key_lengths)
        probs = [joint] * len(logits)
        weights = joint
    contexts = [torch.matmul(p, vi) for p, vi in zip(probs, v)]  # n x (B, H, T, D)
    batch, heads, length, dim = contexts[0].shape
    # (B, H, T, D) -> (B, T, H*D): heads concatenated, as in ordinary multi-head attention
    flat = [c.transpose(1, 2).reshape(batch, length, heads * dim) for c in contexts]
    combined = sum(flat) if sum_contexts else torch.cat(flat, dim=-1)
    return combined, weights
