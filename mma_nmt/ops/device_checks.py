"""The device check that every operator's C++ op makes, for its fake (meta) kernel.

A call that mixes meta tensors with real ones is dispatched to the fake kernel, which returns tensors of the right
shape without reading anything; without this check such a call would succeed silently instead of raising like the
C++ op does for any other pair of devices.
"""

from __future__ import annotations

import torch


def check_same_device(op: str, anchor_name: str, anchor: torch.Tensor, **tensors: torch.Tensor | None) -> None:
    """Raises ``ValueError`` naming the first of ``tensors`` that is not on ``anchor``'s device (None is skipped)."""
    for name, tensor in tensors.items():
        if tensor is not None and tensor.device != anchor.device:
            raise ValueError(f"{op}: {name} is on {tensor.device} but {anchor_name} is on {anchor.device}")
