"""The attention-dropout keep mask of ``csrc/attention/dropout_hash.h``, recomputed with int64 tensor arithmetic."""

from __future__ import annotations

import torch

_LOW32 = 0xFFFFFFFF


def _mix32(x: torch.Tensor) -> torch.Tensor:
    # Values stay in [0, 2^32) and multipliers below 2^31, so int64 products never overflow.
    x = x ^ (x >> 16)
    x = (x * 0x7FEB352D) & _LOW32
    x = x ^ (x >> 15)
    x = (x * 0x2C1B3C6D) & _LOW32
    return x ^ (x >> 16)


def dropout_keep_mask(seed: int, shape: tuple[int, int, int, int], p: float, device=None) -> torch.Tensor:
    """Bool tensor of ``shape`` (B, H, T, S): True where the fused kernel keeps attention weight (b, h, i, j)."""
    seed &= (1 << 64) - 1
    numel = 1
    for size in shape:
        numel *= size
    flat = torch.arange(numel, dtype=torch.int64, device=device)
    h = _mix32(torch.full_like(flat, seed >> 32))
    h = _mix32(h ^ (seed & _LOW32))
    h = _mix32(h ^ (flat >> 32))
    h = _mix32(h ^ (flat & _LOW32))
    threshold = int(p * 16777216.0)
    return ((h >> 8) >= threshold).reshape(shape)
