"""The memory layout and dtype of the operators' results, as the fake (meta) kernels must report them.

``torch.compile`` plans a graph from the fake kernels alone: AOTAutograd and inductor take the strides of every fake
result as the real kernel's and assert them at run time. A fake kernel that keeps an input's strides where the real one
returns a contiguous tensor (``torch.empty_like`` of a transposed head view) compiles, then fails, or worse feeds the
next kernel a wrong layout. Every fake kernel therefore builds its results with the helpers below, each the Python twin
of the allocation its C++ kernel makes:

- :func:`contiguous_like`: ``at::empty_like(x, at::MemoryFormat::Contiguous)`` (or ``at::zeros(x.sizes(), ...)``), the
  gradients of shared-value and multi-layer attention (CPU and CUDA), of the GMM's mixture and gate, and the weight
  gradients of the multi-hop operators;
- :func:`position_major` and :func:`projection_gradient_like`: ``attention``'s, ``gmm_attention``'s and the multi-hop
  operators' results and their projections' gradients, on every device (``position_major`` and ``gradient_like`` in
  csrc/common/head_layout.h; the CUDA kernels address head tensors through their strides, csrc/common/head_rows.h).

Forward results made with ``new_empty(shape)`` are contiguous, as the kernels' ``at::empty(shape)``. Statistics saved
for the backward (log-sum-exp, the GMM's log mass and contexts) have :func:`statistics_dtype`. The autograd formulas
hand ``grad_out`` to the backward operators as it comes: every kernel reads it through its strides, or copies it
itself.
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


def position_major(like: torch.Tensor, dim: int) -> torch.Tensor:
    """A (B, H, T, dim) result laid out as the attention, GMM and multi-hop kernels store it (``like`` is (B, H, T, ·)):
    (B, T, H, dim) in memory, so that merging the heads is a view."""
    batch, heads, query_len, _ = like.shape
    return like.new_empty((batch, query_len, heads, dim)).transpose(1, 2)


def projection_gradient_like(projection: torch.Tensor) -> torch.Tensor:
    """The gradient of a (B, H, L, dim) input of ``attention``, ``gmm_attention`` or a multi-hop operator as the
    kernels store it: laid out like the input when that keeps the last dimension contiguous (a head view of a
    projection gets a position-major gradient, which the projection's backward reads without a copy), else
    position-major."""
    grad = torch.empty_like(projection)
    return grad if grad.stride(3) == 1 or grad.shape[3] <= 1 else position_major(projection, projection.shape[3])
