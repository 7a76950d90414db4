"""Head layout and initialisation shared by every multi-head attention module."""

from __future__ import annotations

from typing import Iterable, Sequence

import torch
from torch import nn
from torch.nn import functional as F


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """(B, L, H*D) -> (B, H, L, D), a view."""
    batch, length, width = x.shape
    return x.view(batch, length, num_heads, width // num_heads).transpose(1, 2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(B, H, L, D) -> (B, L, H*D)."""
    batch, heads, length, dim = x.shape
    return x.transpose(1, 2).reshape(batch, length, heads * dim)


def joint_projection(x: torch.Tensor, projections: Sequence[nn.Linear]) -> tuple[torch.Tensor, ...]:
    """``tuple(p(x) for p in projections)`` in one GEMM: (..., E) -> n x (..., E_i), views of one (..., sum E_i)
    tensor. One matrix multiply with the stacked weights instead of n (and one instead of n - 1 additions of the
    input gradients in backward); the parameters stay separate."""
    biases = [p.bias for p in projections]
    if len({b is None for b in biases}) > 1:  # some with a bias, some without
        return tuple(p(x) for p in projections)
    weight = torch.cat([p.weight for p in projections])  # (sum E_i, E)
    bias = None if biases[0] is None else torch.cat(biases)
    return F.linear(x, weight, bias).split([p.out_features for p in projections], dim=-1)


def init_attention_projections(inputs: Iterable[nn.Linear], output: nn.Linear) -> None:
    """fairseq's initialisation: Xavier with gain 1/sqrt(2) on the query/key/value projections, plain Xavier on the
    output projection, zero biases."""
    inputs = list(inputs)
    for proj in inputs:
        nn.init.xavier_uniform_(proj.weight, gain=2 ** -0.5)
    nn.init.xavier_uniform_(output.weight)
    for proj in (*inputs, output):
        if proj.bias is not None:
            nn.init.zeros_(proj.bias)
