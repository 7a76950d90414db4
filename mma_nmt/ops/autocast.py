"""The operators under CPU autocast: their CPU kernels compute in float32 or float64 only, so under
``torch.autocast("cpu", dtype=torch.bfloat16)`` (``train.amp = "bf16"`` on the CPU) they take their bfloat16 (or
float16) inputs in float32 and return float32, while the layers around them (linear projections, feed-forward) run in
bfloat16 as autocast decides. The cast is an ordinary autograd op, so gradients reach the bfloat16 activations in
bfloat16. float64 inputs are left alone, as autocast leaves them. The CUDA kernels take bfloat16 and float16
themselves: nothing is cast there."""

from __future__ import annotations

import torch

_REDUCED = (torch.bfloat16, torch.float16)  # what the CPU kernels do not take


def _to_float32(value):
    if isinstance(value, torch.Tensor) and value.device.type == "cpu" and value.dtype in _REDUCED:
        return value.float()
    return value


def float32_under_cpu_autocast(args: tuple, list_arguments: tuple[int, ...]) -> tuple:
    """``args`` (an operator's arguments in schema order; Tensor[] arguments at ``list_arguments``) with their CPU
    bfloat16/float16 tensors cast to float32 while CPU autocast is on; ``args`` itself otherwise."""
    if not torch.is_autocast_enabled("cpu"):
        return args
    return tuple([_to_float32(t) for t in arg] if i in list_arguments else _to_float32(arg)
                 for i, arg in enumerate(args))


def register_cpu_autocast(name: str) -> None:
    """Registers ``mma_nmt::<name>`` for the AutocastCPU key with a float32 cast, for code that calls
    ``torch.ops.mma_nmt.<name>`` itself (the library's own calls cast first: :func:`float32_under_cpu_autocast`)."""
    torch.library.register_autocast(f"mma_nmt::{name}", "cpu", torch.float32)
