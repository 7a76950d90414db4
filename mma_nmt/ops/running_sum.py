"""Running sums that torch's deterministic algorithms accept on every device.

torch 2.13's floating-point ``cumsum`` on CUDA has no deterministic implementation: under
``torch.use_deterministic_algorithms(True)`` it raises (torch 2.13's docs list it), in the forward and in the
backward, which is a ``cumsum`` too; torch 2.14 moved it to the operators that act deterministically. The package
supports both, so :func:`running_sum` adds by doubling under the mode on every torch version: after ``ceil(log2 n)``
rounds of ``out[i] += out[i - 2^r]`` every position holds the sum of its prefix. Each round is one elementwise
addition of a shifted copy, so the additions happen in one fixed order on every run, forward and backward (autograd
through ``cat``, ``narrow`` and ``add``). O(n log n) additions instead of n: meant for the short sequences of a
mixture's target steps, not for long ones.
"""

from __future__ import annotations

import torch


def prefix_sums_by_doubling(x: torch.Tensor, dim: int) -> torch.Tensor:
    """``torch.cumsum(x, dim)`` as ``ceil(log2 n)`` shifted additions (the summation order differs from cumsum's, so
    floating-point results agree to rounding, not bit for bit)."""
    dim = dim % x.dim() if x.dim() else 0
    n = x.shape[dim] if x.dim() else 1
    out = x
    shift = 1
    while shift < n:
        head = out.new_zeros(out.shape[:dim] + (shift,) + out.shape[dim + 1:])  # nothing to add before position shift
        out = out + torch.cat([head, out.narrow(dim, 0, n - shift)], dim=dim)  # out[i] += out[i - shift]
        shift *= 2
    return out


def running_sum(x: torch.Tensor, dim: int) -> torch.Tensor:
    """``torch.cumsum(x, dim)``, or :func:`prefix_sums_by_doubling` while torch's deterministic algorithms are on (on
    the CPU too, where cumsum would do: one path under the mode everywhere, so the CPU tests run the GPU's)."""
    if torch.are_deterministic_algorithms_enabled() and (x.is_floating_point() or x.is_complex()):
        return prefix_sums_by_doubling(x, dim)
    return torch.cumsum(x, dim)


__all__ = ["prefix_sums_by_doubling", "running_sum"]
