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


def multilayer_attention_op_reference(q: Sequence[torch.Tensor], k: Sequence[torch.Tensor], v: Sequence[torch.Tensor],
                                      *, num_heads: int, layer_specific: bool = False,
                                      key_lengths: torch.Tensor | None = None, scale: float | None = None
                                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """The contract of ``mma_nmt::multilayer_attention`` (``mma_nmt.ops.multilayer_attention``) in plain PyTorch, on
    the per-layer projections ``q_i`` (B, T, E), ``k_i`` (B, S, E) and ``v_j`` (B, S, Ev) (n of them, or one with
    joint weights). Returns ``(out (B, T, sets*Ev) = [c_1 .. c_sets], weights (B, heads', T, S))`` with heads' =
    num_heads (joint) or n * num_heads (layer i's head h at i * num_heads + h)."""
    def heads(x):
        return x.view(x.shape[0], x.shape[1], num_heads, x.shape[2] // num_heads).transpose(1, 2)  # -> (B, H, L, D)

    if scale is None:
        head_dim = q[0].shape[-1] // num_heads
        scale = 1.0 / math.sqrt(head_dim) if head_dim > 0 else 1.0
    logits = [torch.matmul(heads(qi), heads(ki).transpose(-1, -2)) * scale for qi, ki in zip(q, k)]  # n x (B, H, T, S)
    if layer_specific:
        probs = [masked_softmax(a, key_lengths) for a in logits]
        weights = torch.cat(probs, dim=1)  # (B, n*H, T, S)
    else:
        weights = masked_softmax(sum(logits), key_lengths)
        probs = [weights] * len(v)
    contexts = [torch.matmul(p, heads(vj)) for p, vj in zip(probs, v)]  # sets x (B, H, T, Dv)
    out = torch.cat([c.transpose(1, 2).flatten(2) for c in contexts], dim=-1)  # (B, T, sets*H*Dv)
    return out, weights
