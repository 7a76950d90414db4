"""Multi-head Luong attention for the LSTM decoder (SPEC section 2), in plain PyTorch.

``implementation="fused"`` uses :class:`~mma_nmt.models.attention_adapters.FusedLuongAttention` (the
``LuongMultiheadAttention`` module on the fused operator) with the same interface, the same state-dict layout and the
same results as :class:`MultiHeadLuongAttention`."""

from __future__ import annotations

import math
from typing import Callable

import torch
from torch import nn

from mma_nmt.models.config import LSTMConfig
from mma_nmt.ops.padding import padding_mask_from_lengths


class MultiHeadLuongAttention(nn.Module):
    """Per head i: ``e = h_t^T W_sc_i hs``, ``alpha_i = softmax(e)`` over true source positions,
    ``c_i = sum_s alpha_i[s] hs_s``, ``a~_i = tanh(W_sm_i [c_i; h_t])`` (d_sm/h), ``a-_i = tanh(W_fd_i [c_i; h_t])``
    (d_fd/h); heads are concatenated. No biases, as in Luong et al."""

    def __init__(self, hidden: int, heads: int, softmax_dim: int, feed_dim: int):
        super().__init__()
        if softmax_dim % heads or feed_dim % heads:
            raise ValueError(f"softmax_dim={softmax_dim} and feed_dim={feed_dim} must be divisible by heads={heads}")
        self.hidden, self.heads = hidden, heads
        self.score = nn.Linear(hidden, heads * hidden, bias=False)  # stacked W_sc_i, applied to encoder states
        bound = 1.0 / math.sqrt(2 * hidden)
        self.w_softmax = nn.Parameter(torch.empty(heads, 2 * hidden, softmax_dim // heads).uniform_(-bound, bound))
        self.w_feed = nn.Parameter(torch.empty(heads, 2 * hidden, feed_dim // heads).uniform_(-bound, bound))

    def precompute_keys(self, encoder_states: torch.Tensor) -> torch.Tensor:
        """encoder_states (B, S, dh) -> keys (B, h, S, dh), once per sentence."""
        batch, length, _ = encoder_states.shape
        keys = self.score(encoder_states).view(batch, length, self.heads, self.hidden)  # (B, S, h, dh)
        return keys.transpose(1, 2)  # (B, h, S, dh)

    def forward(self, query: torch.Tensor, keys: torch.Tensor, encoder_states: torch.Tensor, lengths: torch.Tensor):
        """query h_t (B, dh), keys (B, h, S, dh), encoder_states (B, S, dh), lengths (B,) ->
        (a~ (B, d_sm), a- (B, d_fd), alpha (B, h, S))."""
        logits = torch.einsum("bhsd,bd->bhs", keys, query)  # (B, h, S)
        padding = padding_mask_from_lengths(lengths, keys.shape[2]).unsqueeze(1)  # (B, 1, S)
        alpha = torch.softmax(logits.masked_fill(padding, float("-inf")), dim=-1)
        context = torch.einsum("bhs,bsd->bhd", alpha, encoder_states)  # (B, h, dh)
        joined = torch.cat([context, query.unsqueeze(1).expand_as(context)], dim=-1)  # (B, h, 2*dh)
        a_softmax = torch.tanh(torch.einsum("bhi,hio->bho", joined, self.w_softmax)).flatten(1)  # (B, d_sm)
        a_feed = torch.tanh(torch.einsum("bhi,hio->bho", joined, self.w_feed)).flatten(1)  # (B, d_fd)
        return a_softmax, a_feed, alpha


def _reference(config: LSTMConfig) -> nn.Module:
    return MultiHeadLuongAttention(config.hidden_size, config.heads, config.softmax_dim, config.feed_dim)


def _fused(config: LSTMConfig) -> nn.Module:
    from mma_nmt.models.attention_adapters import FusedLuongAttention

    return FusedLuongAttention(config)


# implementation name -> builder
LUONG_ATTENTION: dict[str, Callable[[LSTMConfig], nn.Module]] = {"reference": _reference, "fused": _fused}


def build_luong_attention(config: LSTMConfig) -> nn.Module:
    if config.attention != "luong":
        raise ValueError(f"unknown LSTM attention {config.attention!r}; known: ['luong']")
    if config.implementation not in LUONG_ATTENTION:
        raise ValueError(f"implementation must be one of {sorted(LUONG_ATTENTION)}, got {config.implementation!r}")
    return LUONG_ATTENTION[config.implementation](config)
