"""The operators under CPU autocast: their CPU kernels compute in float32 or float64 only, so under
``torch.autocast("cpu", dtype=torch.bfloat16)`` (``train.amp = "bf16"`` on the CPU) they take their bfloat16 (or
float16) inputs in float32 and return float32, while the layers around them (linear projections, feed-forward) run in
bfloat16 as autocast decides. The cast is an ordinary autograd op, so gradients reach the bfloat16 activations in
bfloat16. float64 inputs are left alone, as autocast leaves them.

The CUDA kernels take bfloat16 and float16 themselves, with one dtype for the values of a call (q, k, v and what
comes with them). Under CUDA autocast an operator's floating-point tensors can disagree: the multi-hop operators'
weights are float32 parameters beside bfloat16 projections, and the GMM module's mixture parameters come out of
softmax and exp in float32 while its queries come out of a bfloat16 projection. Such a call takes its values in the
widest of their dtypes, as autocast's own "promote" ops (``torch.cat``, ``addcmul``) do (:func:`settled_dtypes`), and
its weights in the values' dtype, as autocast casts a linear layer's weight to its input's. The GMM mixture stays
float32 beside bfloat16 or float16 values: its kernels read it in float32 (rounding its centres, source positions, to
bfloat16's 8 significant bits would move them by up to a whole position from 256 on), and the attention runs in half
precision. A backward's saved statistics follow the values' dtype and never decide it. A call whose tensors already
agree, attention's q, k and v from one projection say, is left as it is. The operator then runs with CUDA autocast off
(``RegisteredOperator.__call__``): its compositions' GEMMs compute in the dtype the call settled on. The same rule is
registered for the AutocastCUDA key of every operator and its backward (:func:`register_cuda_autocast`), for the calls
that do not go through the library's functions: ``torch.ops.mma_nmt.<name>`` called directly, the backward operators
that autograd calls under the autocast state of the ``backward()`` call, and ``torch.compile``'s tracing."""

from __future__ import annotations

import functools
from collections.abc import Collection
from dataclasses import dataclass

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


# Arguments a backward operator takes from its forward's saved statistics (log-sum-exps, contexts), which the forward
# wrote in float32 beside half-precision inputs (float64 beside float64): they follow the dtype the call settles on
# and never decide it.
SAVED_STATISTICS = frozenset({"lse", "log_mass", "alpha_context", "beta_context"})


@dataclass(frozen=True)
class AutocastArguments:
    """How the CUDA autocast rule treats an operator's schema arguments, by position: ``lists`` are its Tensor[]
    arguments, ``statistics`` its saved statistics (:data:`SAVED_STATISTICS`), ``float32_beside_half`` those that may
    stay in float32 beside float16/bfloat16 values (the GMM mixture, whose means bfloat16 would round by up to a whole
    source position from 256 on), ``weights`` the module's parameters, which take the values' dtype as autocast casts
    a linear layer's weight to its input's (the multi-hop operators' weights). Every other floating-point tensor is a
    value."""

    lists: tuple[int, ...] = ()
    statistics: frozenset[int] = frozenset()
    float32_beside_half: frozenset[int] = frozenset()
    weights: frozenset[int] = frozenset()

    @classmethod
    def of(cls, op: torch._ops.OpOverload, float32_beside_half: Collection[str] = (),
           weights: Collection[str] = ()) -> AutocastArguments:
        names = [argument.name for argument in op._schema.arguments]

        def named(chosen):
            return frozenset(i for i, name in enumerate(names) if name in chosen)

        return cls(tensor_list_positions(op), named(SAVED_STATISTICS), named(float32_beside_half), named(weights))


def _widest(dtypes) -> torch.dtype | None:
    return functools.reduce(torch.promote_types, dtypes) if dtypes else None


def _values_dtype(dtypes: set, half: torch.dtype) -> torch.dtype | None:
    """The dtype a call's values settle on: the widest of theirs, but ``half`` (autocast's dtype) where they mix
    float16 and bfloat16."""
    if len(dtypes) > 1 and dtypes <= set(_REDUCED) and half in dtypes:
        return half
    return _widest(dtypes)


def settled_dtypes(args: tuple, arguments: AutocastArguments, device_type: str = "cuda",
                   half: torch.dtype | None = None) -> tuple:
    """``args`` (an operator's arguments in schema order) with their floating-point tensors on ``device_type`` in the
    dtypes one kernel call takes, where they do not have them already (else ``args`` itself):

    - the values in the widest of their dtypes, as autocast's own "promote" ops (``torch.cat``, ``addcmul``) do; but
      values that mix float16 and bfloat16 take ``half``, autocast's dtype (default: ``device_type``'s), as its
      matmuls would: cuDNN's LSTM returns float16 under any CUDA autocast, so the LSTM model's attention gets
      float16 encoder states beside bfloat16 projections under bfloat16 autocast;
    - the ``float32_beside_half`` arguments in float32 where the values settle on float16/bfloat16 and these are
      float32 or narrower (a mixture that came out of softmax and exp in float32 stays there); otherwise everything
      takes the widest dtype of all;
    - the weights in the values' dtype (in the widest of their own where the call has no value);
    - the saved statistics in float32, or float64 beside float64 values."""
    def floating(value):
        return isinstance(value, torch.Tensor) and value.is_floating_point() and value.device.type == device_type

    found = [(i, t) for i, arg in enumerate(args)  # (position, tensor) of every floating-point tensor, lists' too
             for t in (arg if i in arguments.lists else (arg,)) if floating(t)]

    def dtypes(positions):
        return {t.dtype for i, t in found if i in positions}

    beside, weights = arguments.float32_beside_half, arguments.weights
    value_positions = set(range(len(args))) - arguments.statistics - beside - weights
    value_dtypes = dtypes(value_positions) or dtypes(weights)
    value = _values_dtype(value_dtypes, half or torch.get_autocast_dtype(device_type))
    wide = _widest(dtypes(beside) | ({value} if value is not None else set()))
    if not (value in _REDUCED and wide == torch.float32):
        value = wide
    statistics = torch.float64 if value == torch.float64 else torch.float32
    target = {**{i: value for i in value_positions | weights}, **{i: wide for i in beside},
              **{i: statistics for i in arguments.statistics}}
    if all(t.dtype == target[i] for i, t in found):
        return args

    def cast(x, i):
        return x.to(target[i]) if floating(x) else x

    return tuple([cast(t, i) for t in arg] if i in arguments.lists else cast(arg, i) for i, arg in enumerate(args))


def tensor_list_positions(op: torch._ops.OpOverload) -> tuple[int, ...]:
    """Positions of ``op``'s Tensor[] arguments in its schema."""
    return tuple(i for i, argument in enumerate(op._schema.arguments)
                 if argument.type.isSubtypeOf(torch._C.ListType.ofTensors()))


_CUDA_AUTOCAST = torch.library.Library("mma_nmt", "IMPL")  # holds the AutocastCUDA kernels


def register_cuda_autocast(name: str, float32_beside_half: Collection[str] = (), weights: Collection[str] = ()) -> None:
    """Registers ``mma_nmt::<name>`` and ``mma_nmt::<name>_backward`` for the AutocastCUDA key: the call's
    floating-point tensors in the dtypes :func:`settled_dtypes` settles on (``float32_beside_half`` and ``weights``
    name the arguments of :class:`AutocastArguments`), then the operator with CUDA autocast off, as
    ``RegisteredOperator.__call__`` does. Without it a direct call would reach the kernel with autocast on and the
    compositions' GEMMs would compute a float32 call in bfloat16."""
    for op_name in (name, f"{name}_backward"):
        op = getattr(torch.ops.mma_nmt, op_name).default

        def kernel(*args, _op=op, _arguments=AutocastArguments.of(op, float32_beside_half, weights), **kwargs):
            with torch.autocast("cuda", enabled=False):
                return _op(*settled_dtypes(args, _arguments), **kwargs)

        _CUDA_AUTOCAST.impl(op_name, kernel, "AutocastCUDA")


def register_cpu_autocast(name: str) -> None:
    """Registers ``mma_nmt::<name>`` for the AutocastCPU key with a float32 cast, for code that calls
    ``torch.ops.mma_nmt.<name>`` itself (the library's own calls cast first: :func:`float32_under_cpu_autocast`)."""
    torch.library.register_autocast(f"mma_nmt::{name}", "cpu", torch.float32)
