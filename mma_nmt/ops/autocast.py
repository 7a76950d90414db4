"""The operators under CPU autocast: their CPU kernels compute in float32 or float64 only, so under
``torch.autocast("cpu", dtype=torch.bfloat16)`` (``train.amp = "bf16"`` on the CPU) they take their bfloat16 (or
float16) inputs in float32 and return float32, while the layers around them (linear projections, feed-forward) run in
bfloat16 as autocast decides. The cast is an ordinary autograd op, so gradients reach the bfloat16 activations in
bfloat16. float64 inputs are left alone, as autocast leaves them.

The CUDA kernels take bfloat16 and float16 themselves, but each wants one dtype for all its floating-point tensors.
Under CUDA autocast they can disagree: the GMM module's mixture parameters come out of softmax and exp in float32
while its queries come out of a bfloat16 projection, and the multi-hop operators' weights are float32 parameters. Such
a call takes them all in the widest dtype, as autocast's own "promote" ops (``torch.cat``, ``addcmul``) do, rather
than rounding the mixture's centres (source positions) to bfloat16's 8 significant bits. A call whose tensors agree,
attention's q, k and v from one projection say, is left as it is. The operator then runs with CUDA autocast off
(``RegisteredOperator.__call__``): its compositions' GEMMs compute in the dtype the call settled on. The same rule is
registered for the AutocastCUDA key of every operator and its backward (:func:`register_cuda_autocast`), for the calls
that do not go through the library's functions: ``torch.ops.mma_nmt.<name>`` called directly, the backward operators
that autograd calls under the autocast state of the ``backward()`` call, and ``torch.compile``'s tracing."""

from __future__ import annotations

import functools

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


def promoted_to_widest(args: tuple, list_arguments: tuple[int, ...], device_type: str = "cuda") -> tuple:
    """``args`` with every floating-point tensor on ``device_type`` (in Tensor[] arguments too) in the widest dtype
    among them, where they do not all have one dtype."""
    def floating(value):
        return isinstance(value, torch.Tensor) and value.is_floating_point() and value.device.type == device_type

    tensors = [t for i, arg in enumerate(args) for t in (arg if i in list_arguments else (arg,)) if floating(t)]
    dtypes = {t.dtype for t in tensors}
    if len(dtypes) < 2:
        return args
    widest = functools.reduce(torch.promote_types, dtypes)

    def cast(value):
        return value.to(widest) if floating(value) else value

    return tuple([cast(t) for t in arg] if i in list_arguments else cast(arg) for i, arg in enumerate(args))


def tensor_list_positions(op: torch._ops.OpOverload) -> tuple[int, ...]:
    """Positions of ``op``'s Tensor[] arguments in its schema."""
    return tuple(i for i, argument in enumerate(op._schema.arguments)
                 if argument.type.isSubtypeOf(torch._C.ListType.ofTensors()))


_CUDA_AUTOCAST = torch.library.Library("mma_nmt", "IMPL")  # holds the AutocastCUDA kernels


def register_cuda_autocast(name: str) -> None:
    """Registers ``mma_nmt::<name>`` and ``mma_nmt::<name>_backward`` for the AutocastCUDA key: the call's
    floating-point tensors in their widest dtype (:func:`promoted_to_widest`), then the operator with CUDA autocast
    off, as ``RegisteredOperator.__call__`` does. Without it a direct call would reach the kernel with autocast on and
    the compositions' GEMMs would compute a float32 call in bfloat16."""
    for op_name in (name, f"{name}_backward"):
        op = getattr(torch.ops.mma_nmt, op_name).default

        def kernel(*args, _op=op, _lists=tensor_list_positions(op), **kwargs):
            with torch.autocast("cuda", enabled=False):
                return _op(*promoted_to_widest(args, _lists), **kwargs)

        _CUDA_AUTOCAST.impl(op_name, kernel, "AutocastCUDA")


def register_cpu_autocast(name: str) -> None:
    """Registers ``mma_nmt::<name>`` for the AutocastCPU key with a float32 cast, for code that calls
    ``torch.ops.mma_nmt.<name>`` itself (the library's own calls cast first: :func:`float32_under_cpu_autocast`)."""
    torch.library.register_autocast(f"mma_nmt::{name}", "cpu", torch.float32)
