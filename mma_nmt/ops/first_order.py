"""The fused operators are differentiable once: their backward operators have no derivative of their own, and no
forward-mode (JVP) formula exists. Without a guard PyTorch answers such requests silently wrong: a double backward
through a backward operator gives exactly zero (with only a one-time warning), ``torch.func.jvp`` a zero tangent. These
two guards turn both into an error that names the operator; :func:`mma_nmt.ops.registration.register_operator` applies
both to every operator.

- :func:`first_order_only` wraps an operator's autograd backward: run with ``create_graph=True`` (grad mode is on
  inside the backward and something it reads requires grad), it raises instead of returning gradients whose own
  gradient would be zero. ``torch.autograd.gradgradcheck``, ``torch.autograd.functional.hessian`` and gradient
  penalties all ask for that graph first.
- :func:`refuse_forward_ad` is called on the tensor arguments of every call of an operator: a tangent attached to any
  of them (``torch.autograd.forward_ad`` or ``torch.func.jvp``) raises.

- :func:`refuse_functorch_gradients` does the same for ``torch.func``'s differentiating transforms (``grad``, ``vjp``,
  ``jacrev``, ``hessian`` and ``vmap`` of them), whose own error ("an autograd.Function ... must override the
  setup_context staticmethod") named no operator. ``vmap`` alone works (PyTorch loops over the batch).

:func:`mma_nmt.ops.registration.register_operator` puts the checks into the operator's autograd kernel, so that they
hold for ``torch.ops.mma_nmt.<name>`` called directly as for the Python functions. Training, ``torch.compile`` (whose
traced backward runs without grad mode), ``gradcheck`` and ``opcheck`` are unaffected.
"""

from __future__ import annotations

import functools
from typing import Callable, Iterable

import torch
import torch.autograd.forward_ad as forward_ad


class HigherOrderGradientError(RuntimeError):
    """A second-order or forward-mode derivative of a fused operator was asked for; only first order exists."""


class FunctionalTransformError(RuntimeError):
    """A ``torch.func`` transform that differentiates (``grad``, ``vjp``, ``jacrev``, ...) reached a fused operator."""


def first_order_only(op: str) -> Callable:
    """Decorator for the autograd backward ``backward(ctx, *grads)`` of operator ``op`` (``"mma_nmt.attention"``)."""

    def decorate(backward: Callable) -> Callable:
        @functools.wraps(backward)
        def guarded(ctx, *grads):
            if torch.is_grad_enabled() and _any_requires_grad((*ctx.saved_tensors, *grads)):
                raise second_order_error(op)
            return backward(ctx, *grads)

        return guarded

    return decorate


def second_order_error(op: str) -> HigherOrderGradientError:
    """The error that a second-order gradient of operator ``op`` raises, here and in the C++ backward of the eager fast
    path (``csrc/eager/first_order.cpp``)."""
    return HigherOrderGradientError(
        f"{op}: second-order gradients (a backward with create_graph=True, gradgradcheck, hessian, a gradient "
        f"penalty) are not implemented; its backward is differentiable only to first order. Use the plain-PyTorch "
        f"reference (mma_nmt.reference) where higher derivatives are needed")


def refuse_forward_ad(op: str, tensors: Iterable[torch.Tensor | None]) -> None:
    """Raises :class:`HigherOrderGradientError` when any of ``tensors`` carries a forward-mode tangent."""
    if forward_ad._current_level < 0:  # no dual level entered: no tensor has a tangent (unpack_dual reads the same)
        return
    if any(isinstance(t, torch.Tensor) and forward_ad.unpack_dual(t).tangent is not None for t in tensors):
        raise HigherOrderGradientError(
            f"{op}: forward-mode derivatives (torch.func.jvp, torch.autograd.forward_ad) are not implemented, only "
            f"reverse mode (backward, torch.autograd.grad). Use the plain-PyTorch reference (mma_nmt.reference) "
            f"for forward mode")


def refuse_functorch_gradients(op: str, tensors: Iterable[torch.Tensor | None]) -> None:
    """Raises :class:`FunctionalTransformError` when a ``torch.func`` transform is active and would differentiate this
    call (grad mode on, an argument requiring grad): where PyTorch's generated autograd kernel would raise its own
    message."""
    if torch._C._are_functorch_transforms_active() and torch.is_grad_enabled() and _any_requires_grad(tensors):
        raise FunctionalTransformError(
            f"{op}: torch.func transforms that differentiate (grad, vjp, jacrev, hessian, vmap of them) are not "
            f"supported; use torch.autograd.grad or .backward() (a loop over the batch instead of vmap), or the "
            f"plain-PyTorch reference (mma_nmt.reference) inside torch.func")


def _any_requires_grad(tensors) -> bool:
    return any(isinstance(t, torch.Tensor) and t.requires_grad for t in tensors)
