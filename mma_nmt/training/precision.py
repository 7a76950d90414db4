"""``train.amp``: the precision the training forward (and the validation loss) runs in.

- ``false``: float32 throughout.
- ``"bf16"``: bfloat16 autocast, on CUDA and on the CPU. No GradScaler: bfloat16 has float32's exponent range. On the
  CPU the fused operators compute in float32 (:mod:`mma_nmt.ops.autocast`), the linear layers in bfloat16.
- ``"fp16"``: float16 autocast with a GradScaler, on CUDA only; the CPU refuses it (use ``"bf16"`` there).

Parameters, gradients and optimizer state stay float32 in every case; so do checkpoints.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass(frozen=True)
class MixedPrecision:
    """What ``train.amp`` means on the training device: ``autocast()`` wraps each forward, ``scaler`` (float16 only)
    scales the loss before backward."""

    device_type: str
    dtype: torch.dtype | None  # None: float32, no autocast
    scaler: torch.amp.GradScaler | None

    def autocast(self):
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.dtype)


def mixed_precision(amp, device: torch.device) -> MixedPrecision:
    """The :class:`MixedPrecision` of ``train.amp`` (``"bf16"``, ``"fp16"`` or false) on ``device``; ValueError for a
    precision the device cannot train in."""
    if not amp:
        return MixedPrecision(device.type, None, None)
    if amp not in AMP_DTYPES:
        raise ValueError(f"train.amp must be 'bf16', 'fp16' or false, got {amp!r}")
    if device.type not in ("cuda", "cpu"):
        raise ValueError(f"train.amp={amp!r} is supported on CUDA and the CPU, not on {device.type}; set train.amp=false")
    if amp == "fp16" and device.type == "cpu":
        raise ValueError("train.amp='fp16' (float16 autocast with a GradScaler) needs CUDA, and this run trains on the "
                         "CPU; use train.amp='bf16' for bfloat16 on the CPU, or train.amp=false")
    if amp == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported(including_emulation=False):
        raise ValueError(f"train.amp='bf16' needs a GPU with native bfloat16 (compute capability 8.0 or higher); "
                         f"{torch.cuda.get_device_name(device)} has none: use train.amp='fp16' or false")
    scaler = torch.amp.GradScaler(device.type) if amp == "fp16" else None
    return MixedPrecision(device.type, AMP_DTYPES[amp], scaler)
