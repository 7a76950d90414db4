"""Layer-aggregation baselines of the MLMHA paper (SPEC section 3): each builds one joint source representation (per
decoder layer, for transparent attention) from all encoder layer outputs, which ordinary cross-attention then reads.

- :class:`LinearFeatureCombination` (Dou et al. 2018; Ampomah et al. 2019): ``LayerNorm(sum_l W_l h_l + b)``, one
  ``E x E`` weight per encoder layer, the same representation for every decoder layer.
- :class:`IterativeFeatureCombination` (Dou et al. 2018): layers merged bottom-up; step ``s`` aggregates the previous
  result ``x`` with layer ``s``'s output ``y`` as ``LayerNorm(FFN([x; y]) + x + y)``.
- :class:`TransparentAttention` (Bapna et al. 2018): a ``(N + 1) x M`` weight matrix, softmax over the N encoder layers
  plus the embeddings, gives decoder layer ``j`` the combination ``sum_i s_ij h_i``.

Inputs are lists of (B, S, E) tensors, bottom layer first.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn


def _check_layers(layer_outputs: Sequence[torch.Tensor], expected: int, what: str) -> None:
    if len(layer_outputs) != expected:
        raise ValueError(f"layer_outputs must hold {expected} tensors ({what}), got {len(layer_outputs)}")


class LinearFeatureCombination(nn.Module):
    """``forward([h_1 .. h_L])`` -> (B, S, E) ``LayerNorm(sum_l W_l h_l + b)``."""

    def __init__(self, embed_dim: int, num_layers: int):
        super().__init__()
        self.num_layers = num_layers
        # one Linear over the concatenated layers is exactly sum_l W_l h_l + b with W = [W_1 .. W_L]
        self.combine = nn.Linear(num_layers * embed_dim, embed_dim)
        self.norm = nn.LayerNorm(embed_dim)

    def forward(self, layer_outputs: Sequence[torch.Tensor]) -> torch.Tensor:
        _check_layers(layer_outputs, self.num_layers, "one per encoder layer")
        return self.norm(self.combine(torch.cat(list(layer_outputs), dim=-1)))  # (B, S, L*E) -> (B, S, E)


class IterativeFeatureCombination(nn.Module):
    """``forward([h_1 .. h_L])`` -> (B, S, E):
    ``x_1 = h_1``, ``x_s = LayerNorm(FFN([x_{s-1}; h_s]) + x_{s-1} + h_s)``."""

    def __init__(self, embed_dim: int, num_layers: int, ffn_dim: int | None = None):
        super().__init__()
        self.num_layers = num_layers
        ffn_dim = ffn_dim or embed_dim
        self.ffns = nn.ModuleList(
            nn.Sequential(nn.Linear(2 * embed_dim, ffn_dim), nn.ReLU(), nn.Linear(ffn_dim, embed_dim))
            for _ in range(num_layers - 1))
        self.norms = nn.ModuleList(nn.LayerNorm(embed_dim) for _ in range(num_layers - 1))

    def forward(self, layer_outputs: Sequence[torch.Tensor]) -> torch.Tensor:
        _check_layers(layer_outputs, self.num_layers, "one per encoder layer")
        x = layer_outputs[0]
        for ffn, norm, y in zip(self.ffns, self.norms, layer_outputs[1:]):
            x = norm(ffn(torch.cat([x, y], dim=-1)) + x + y)
        return x


class TransparentAttention(nn.Module):
    """``forward([h_0 (embeddings), h_1 .. h_N])`` -> list of M tensors (B, S, E), one per decoder layer."""

    def __init__(self, num_encoder_layers: int, num_decoder_layers: int):
        super().__init__()
        self.num_inputs = num_encoder_layers + 1
        self.weights = nn.Parameter(torch.zeros(self.num_inputs, num_decoder_layers))  # uniform mix at start

    def mixing_weights(self) -> torch.Tensor:
        """(N + 1, M) softmax over the encoder layers for each decoder layer."""
        return torch.softmax(self.weights, dim=0)

    def forward(self, layer_outputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        _check_layers(layer_outputs, self.num_inputs, "the embeddings, then one per encoder layer")
        stacked = torch.stack(list(layer_outputs), dim=-1)  # (B, S, E, N+1)
        mixed = torch.matmul(stacked, self.mixing_weights())  # (B, S, E, M)
        return list(mixed.unbind(dim=-1))
