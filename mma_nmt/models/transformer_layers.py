"""Encoder and decoder layers of the Transformer (post-norm as in the papers, pre-norm as an option) and the
sinusoidal positional embedding."""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from mma_nmt.models.attention_factory import (
    build_cross_attention,
    build_decoder_self_attention,
    build_encoder_self_attention,
)
from mma_nmt.models.config import TransformerConfig
from mma_nmt.models.incremental import EncoderOut, module_cache


def sinusoidal_positions(num_positions: int, dim: int) -> torch.Tensor:
    """(num_positions, dim) table: sin on the first half of the channels, cos on the second (tensor2tensor layout)."""
    half = dim // 2
    freq = torch.exp(torch.arange(half, dtype=torch.float32) * -(math.log(10000.0) / max(half - 1, 1)))
    angles = torch.arange(num_positions, dtype=torch.float32).unsqueeze(1) * freq.unsqueeze(0)  # (P, half)
    table = torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)
    if dim % 2:
        table = torch.cat([table, torch.zeros(num_positions, 1)], dim=1)
    return table


class FeedForward(nn.Module):
    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.fc1 = nn.Linear(config.d_model, config.ffn_dim)
        self.fc2 = nn.Linear(config.ffn_dim, config.d_model)
        self.activation_dropout = config.activation_dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = F.dropout(F.relu(self.fc1(x)), self.activation_dropout, self.training)
        return self.fc2(hidden)


class Sublayer(nn.Module):
    """Residual wrapper: post-norm ``LN(x + drop(f(x)))`` or pre-norm ``x + drop(f(LN(x)))``."""

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.norm = nn.LayerNorm(config.d_model)
        self.dropout = config.dropout
        self.pre_norm = config.pre_norm

    def forward(self, x: torch.Tensor, fn) -> tuple[torch.Tensor, object]:
        """``fn(x) -> (y, aux)``; returns the new residual stream and ``aux``."""
        y, aux = fn(self.norm(x) if self.pre_norm else x)
        x = x + F.dropout(y, self.dropout, self.training)
        return (x if self.pre_norm else self.norm(x)), aux


class EncoderLayer(nn.Module):
    def __init__(self, config: TransformerConfig, layer: int):
        super().__init__()
        self.self_attn = build_encoder_self_attention(config, layer)
        self.ffn = FeedForward(config)
        self.attn_block = Sublayer(config)
        self.ffn_block = Sublayer(config)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor, need_weights: bool = False):
        """x (B, S, E), lengths (B,) -> (x (B, S, E), self-attention weights (B, H, S, S) or None)."""
        x, weights = self.attn_block(x, lambda h: self.self_attn(h, key_lengths=lengths, need_weights=need_weights))
        x, _ = self.ffn_block(x, lambda h: (self.ffn(h), None))
        return x, weights


class DecoderLayer(nn.Module):
    def __init__(self, config: TransformerConfig, layer: int):
        super().__init__()
        self.name = f"decoder.{layer}"
        self.self_attn = build_decoder_self_attention(config)
        self.cross_attn = build_cross_attention(config, layer)
        self.ffn = FeedForward(config)
        self.self_block = Sublayer(config)
        self.cross_block = Sublayer(config)
        self.ffn_block = Sublayer(config)

    def forward(self, x: torch.Tensor, encoder_out: EncoderOut, incremental_state=None, need_weights: bool = False):
        """x (B, T, E) -> (x (B, T, E), cross-attention weights (B, H, T, S) or None)."""
        self_cache = module_cache(incremental_state, self.name + ".self")
        cross_cache = module_cache(incremental_state, self.name + ".cross")
        x, _ = self.self_block(x, lambda h: self.self_attn(h, cache=self_cache))
        x, weights = self.cross_block(
            x, lambda h: self.cross_attn(h, encoder_out, cache=cross_cache, need_weights=need_weights))
        x, _ = self.ffn_block(x, lambda h: (self.ffn(h), None))
        return x, weights
