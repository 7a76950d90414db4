"""The memory layout and dtype of the operators' results, as the fake (meta) kernels must report them.

``torch.compile`` plans a graph from the fake kernels alone: AOTAutograd and inductor take the strides of every fake
result as the real kernel's and assert them at run time. A fake kernel that keeps an input's strides where the real one
returns a contiguous tensor (``torch.empty_like`` of a transposed head view) compiles, then fails, or worse feeds the
next kernel a wrong layout. Every fake kernel therefore builds its results with the helpers below, each the Python twin
of the allocation its C++ kernel makes:

- :func:`contiguous_like`: ``at::empty_like(x, at::MemoryFormat::Contiguous)`` (or ``at::zeros(x.sizes(), ...)``), the
  gradients of GMM, shared-value and multi-layer attention (CPU and CUDA) and the weight gradients of the multi-hop
  operators;
- :func:`position_major` and :func:`projection_gradient_like`: ``attention``'s output and gradients on every device
  (``every_device=True``), and the multi-hop operators' results and their projections' gradients on the CPU,
  contiguous on CUDA (``position_major`` and ``gradient_like`` in csrc/common/head_layout.h).

Forward results made with ``new_empty(shape)`` are contiguous, as the kernels' ``at::empty(shape)``. Statistics saved
for the backward (log-sum-exp, the GMM's log mass and contexts) have :func:`statistics_dtype`. :func:`kernel_grad_out`
is the layout in which the autograd formulas hand ``grad_out`` to the backward kernels.
"""

from __future__ import annotations

import torch


def statistics_dtype(x: torch.Tensor) -> torch.dtype:
    """The dtype the kernels accumulate and store statistics in for inputs like ``x``: float32 for float16 and bfloat16
    inputs, else ``x``'s own dtype."""
    return torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype


def contiguous_like(x: torch.Tensor) -> torch.Tensor:
    """A contiguous tensor of ``x``'s shape, dtype and device, whatever ``x``'s strides."""
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def position_major(like: torch.Tensor, dim: int, *, every_device: bool = False) -> torch.Tensor:
    """A (B, H, T, dim) result laid out as the kernels of ``like``'s device store it (``like`` is (B, H, T, ·)):
    (B, T, H, dim) in memory on the CPU, and on every device with ``every_device`` (``attention``); contiguous
    elsewhere (the multi-hop operators on CUDA)."""
    batch, heads, query_len, _ = like.shape
    if every_device or like.device.type == "cpu":
        return like.new_empty((batch, query_len, heads, dim)).transpose(1, 2)
    return like.new_empty((batch, heads, query_len, dim))


def projection_gradient_like(projection: torch.Tensor, *, every_device: bool = False) -> torch.Tensor:
    """The gradient of a (B, H, L, dim) input of ``attention`` or a multi-hop operator as the kernels store it: laid
    out like the input when that keeps the last dimension contiguous, else position-major, on the CPU and on every
    device with ``every_device`` (``attention``); contiguous elsewhere."""
    if not every_device and projection.device.type != "cpu":
        return position_major(projection, projection.shape[3])
    grad = torch.empty_like(projection)
    if grad.stride(3) == 1 or grad.shape[3] <= 1:
        return grad
    return position_major(projection, projection.shape[3], every_device=True)


def kernel_grad_out(grad_out: torch.Tensor, *, every_device: bool = False) -> torch.Tensor:
    """``grad_out`` as the backward kernels of ``attention`` and the multi-hop operators take it: as it comes on the
    CPU, and on every device with ``every_device`` (``attention``: its kernels read it through its strides),
    contiguous elsewhere (the Python twin of csrc/eager/kernel_grad_out.h)."""
    return grad_out if every_device or grad_out.device.type == "cpu" else grad_out.contiguous()
