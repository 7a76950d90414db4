"""The Transformer's attention places built from ``torch.nn.MultiheadAttention`` (``implementation="torch"``): the
model a user would build without this library, kept as a baseline for speed comparisons (``benchmarks/``).

- encoder self-attention, ``"standard"`` or ``"mma"``: mixed heads become a per-head boolean mask (B*H, S, S) given as
  ``attn_mask`` (SPEC section 1 via :func:`~mma_nmt.reference.visibility_mask`); all-global heads use
  ``key_padding_mask`` only;
- decoder self-attention: a causal mask; with an incremental cache, the layer inputs so far are kept (batch first)
  and projected again at every step, because ``nn.MultiheadAttention`` has no key/value cache;
- ``"standard"`` cross-attention over the top encoder states.

Multi-hop, MLMHA and GMM attention have no ``nn.MultiheadAttention`` form: asking for them raises ``ValueError``.
Parameters use ``nn.MultiheadAttention``'s layout (``in_proj_weight`` (3E, E), ``out_proj``) and initialisation.
"""

from __future__ import annotations

import torch
from torch import nn

from mma_nmt.models.config import TransformerConfig
from mma_nmt.models.incremental import EncoderOut
from mma_nmt.ops.head_spec import HeadKind, parse_head_spec
from mma_nmt.reference.attention import visibility_mask


def _multihead(config: TransformerConfig) -> nn.MultiheadAttention:
    return nn.MultiheadAttention(config.d_model, config.heads, dropout=config.attention_dropout, batch_first=True)


def _padding_mask(lengths: torch.Tensor | None, key_len: int, device) -> torch.Tensor | None:
    """(B, S) bool, True at padding keys (``nn.MultiheadAttention``'s convention), or None without lengths."""
    if lengths is None:
        return None
    return torch.arange(key_len, device=device).unsqueeze(0) >= lengths.to(device).unsqueeze(1)


def _call(attn: nn.MultiheadAttention, query, key, *, key_padding_mask=None, attn_mask=None, is_causal=False,
          need_weights: bool):
    """``nn.MultiheadAttention`` with per-head weights (B, H, T, S) when asked for."""
    out, weights = attn(query, key, key, key_padding_mask=key_padding_mask, attn_mask=attn_mask, is_causal=is_causal,
                        need_weights=need_weights, average_attn_weights=False)
    return out, (weights if need_weights else None)


class TorchSelfAttention(nn.Module):
    """Encoder self-attention with head kinds ``head_spec``: ``forward(x (B, S, E), *, key_lengths (B,),
    need_weights) -> (out (B, S, E), weights (B, H, S, S) or None)``."""

    def __init__(self, config: TransformerConfig, head_spec: str = "G", window: int = 1):
        super().__init__()
        self.attn = _multihead(config)
        self.heads, self.window = config.heads, window
        self.head_kinds = parse_head_spec(head_spec, config.heads)
        self.all_global = all(kind == HeadKind.GLOBAL for kind in self.head_kinds)

    def forward(self, x: torch.Tensor, *, key_lengths: torch.Tensor | None = None, need_weights: bool = False):
        batch, length, _ = x.shape
        if self.all_global:
            return _call(self.attn, x, x, key_padding_mask=_padding_mask(key_lengths, length, x.device),
                         need_weights=need_weights)
        visible = visibility_mask(self.head_kinds, length, length, window=self.window, key_lengths=key_lengths,
                                  batch=batch, device=x.device)  # (B, H, S, S)
        # Only padding queries can see no key (every head sees its own position); letting them see every key keeps
        # the softmax finite there. Their outputs are never read as real positions.
        visible = visible | ~visible.any(dim=-1, keepdim=True)
        mask = ~visible.reshape(batch * self.heads, length, length)  # (B*H, S, S), True = not allowed
        return _call(self.attn, x, x, attn_mask=mask, need_weights=need_weights)


class TorchCausalSelfAttention(nn.Module):
    """Decoder self-attention: ``forward(x (B, T, E), *, cache, need_weights) -> (out (B, T, E), weights or None)``.
    ``cache["x"]`` holds the inputs (B, S, E) seen so far; the queries are the last T of them."""

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.attn = _multihead(config)

    def forward(self, x: torch.Tensor, *, cache: dict | None = None, need_weights: bool = False):
        keys = x
        if cache is not None:
            keys = x if "x" not in cache else torch.cat([cache["x"], x], dim=1)  # (B, S, E)
            cache["x"] = keys
        query_len, key_len = x.shape[1], keys.shape[1]
        offset = key_len - query_len
        if query_len == 1:  # one new position sees everything before it
            return _call(self.attn, x, keys, need_weights=need_weights)
        i = torch.arange(query_len, device=x.device).unsqueeze(1) + offset  # (T, 1) query positions
        j = torch.arange(key_len, device=x.device).unsqueeze(0)  # (1, S)
        return _call(self.attn, x, keys, attn_mask=j > i, is_causal=offset == 0, need_weights=need_weights)


class TorchCrossAttention(nn.Module):
    """Cross-attention over ``encoder_out.out``; the projections of the encoder states are recomputed at every
    incremental step (``encoder_out`` follows beam reordering, so ``cache`` is not needed)."""

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.attn = _multihead(config)

    def forward(self, x: torch.Tensor, encoder_out: EncoderOut, *, cache: dict | None = None,
                need_weights: bool = False):
        memory = encoder_out.out
        mask = _padding_mask(encoder_out.lengths, memory.shape[1], x.device)
        return _call(self.attn, x, memory, key_padding_mask=mask, need_weights=need_weights)


def _unsupported(place: str, kind: str) -> ValueError:
    return ValueError(f"implementation='torch' builds attention from nn.MultiheadAttention, which has no form of "
                      f"{place} attention {kind!r}; use implementation='fused' or 'reference'")


def build_encoder_self_attention(config: TransformerConfig, layer: int) -> nn.Module:
    kind = config.encoder.attention
    if kind == "standard":
        return TorchSelfAttention(config)
    if kind == "mma":
        return TorchSelfAttention(config, config.encoder.head_spec, config.encoder.window)
    raise _unsupported("encoder self-", kind)


def build_cross_attention(config: TransformerConfig, layer: int) -> nn.Module:
    kind = config.decoder.cross_attention
    if kind == "standard":
        return TorchCrossAttention(config)
    raise _unsupported("decoder cross-", kind)
