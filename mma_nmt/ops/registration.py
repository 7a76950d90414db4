"""One registration path for every fused operator ``torch.ops.mma_nmt.<name>`` and its ``<name>_backward``.

:func:`register_operator` does, once per operator, what pytorch/extension-cpp's ``ops.py`` does: it registers the fake
(meta) kernels of the operator and of its backward operator (``torch.library.register_fake``) and the operator's
autograd formula (``torch.library.register_autograd``: ``setup_context`` plus a backward that calls the backward
operator). It also applies, for every operator alike, the guards of :mod:`mma_nmt.ops.first_order`: the backward is
wrapped in ``first_order_only``; the operator's autograd kernel, which every call of ``torch.ops.mma_nmt.<name>`` goes
through, refuses forward-mode tangents (``refuse_forward_ad``) and ``torch.func``'s differentiating transforms
(``refuse_functorch_gradients``) before it runs the kernel ``torch.library.register_autograd`` would register; and a
call through the returned :class:`RegisteredOperator` first refuses tangents and devices this build has no kernels for
(``require_device_support``).

Eager fast path (kept, for every operator). torch.library's generic autograd wrapper costs per call a Python round trip
from the dispatcher, a redispatch and a rebuild of the schema's argument list (``torch._library.utils.fill_defaults``).
So an eager call that needs gradients applies the *same* ``setup_context`` and guarded backward through an
``autograd.Function`` that calls the operator below autograd, and an eager call without gradients goes straight to the
device kernel. Where ``csrc/eager/`` has the formula in C++ (``native_eager``; every operator has it), every eager
call takes that ``torch::autograd::Function`` instead, with no Python between the kernels in forward or backward; its
backward raises the same :class:`~mma_nmt.ops.first_order.HigherOrderGradientError`, its argument checks the same
errors. Without gradients (``no_grad``, inputs that need none) it records no graph, and its call costs less host time
than the ``OpOverload``'s below autograd (one thread, tiny problem: up to 7 us less per call, level at worst;
``python -m benchmarks.bench_inference_call``, ``benchmarks/results/inference_call.cpu-1thread.md``), which a decoder
step pays at every target position. The Python ``autograd.Function`` stays as the path of an operator registered
without one.
``python -m benchmarks.bench_registration_path`` times the paths on one forward and backward of ``out.sum()`` (B = 1,
H = 4, T = S = 16, D = 16, K = 4, one thread; ``benchmarks/results/registration_path.cpu-1thread.md``).

Under ``torch.compile`` and ``torch.func`` transforms the operator itself is called, so they see the registered fake
kernels and autograd, as do ``opcheck``, ``gradcheck`` of ``torch.ops.mma_nmt.*`` and direct calls of the op. Every
path runs the same kernels on the same arguments: results are bit-identical.

Without the compiled extension (:mod:`mma_nmt._extension`) nothing is registered: :func:`register_operator` and
:func:`backward_operator` return a :class:`MissingOperator`, whose call raises the error that says how to build, so
that importing the package, and everything that needs no fused operator, still works.
"""

from __future__ import annotations

from typing import Callable, Iterator

import torch

from torch._library.autograd import Info, make_autograd_impl

from mma_nmt._extension import extension_available, extension_module, require_device_support, require_extension
from mma_nmt.ops.autocast import (AutocastArguments, float32_under_cpu_autocast, register_cpu_autocast,
                                  register_cuda_autocast, settled_dtypes, tensor_list_positions)
from mma_nmt.ops.first_order import first_order_only, refuse_forward_ad, refuse_functorch_gradients

REGISTERED_OPERATORS: dict[str, RegisteredOperator] = {}  # "attention" -> its RegisteredOperator (register_operator)


class RegisteredOperator:
    """``torch.ops.mma_nmt.<name>`` with its fake kernels, autograd and guards registered; call it with the schema's
    arguments in order (trailing ones with defaults may be left out). ``op`` is the registered operator itself
    (``OpOverload``), ``eager_function`` the ``autograd.Function`` of the eager fast path."""

    def __init__(self, name: str, setup_context: Callable, backward: Callable, native_eager: Callable | None = None,
                 float32_beside_half: tuple[str, ...] = (), weights: tuple[str, ...] = ()):
        self.name = f"mma_nmt.{name}"
        self.op = getattr(torch.ops.mma_nmt, name).default
        arguments = self.op._schema.arguments
        self._defaults = tuple(argument.default_value for argument in arguments)
        self._required = sum(not argument.has_default_value() for argument in arguments)
        # Positions of Tensor[] arguments: autograd.Function tracks only tensors passed to it directly.
        self._list_arguments = tensor_list_positions(self.op)
        # how CUDA autocast settles the dtypes of a call (mma_nmt.ops.autocast.settled_dtypes)
        self._autocast_arguments = AutocastArguments.of(self.op, float32_beside_half, weights)
        self.eager_function = _eager_function(self.op, setup_context, backward)
        self.native_eager = native_eager  # the same formula in C++ (csrc/eager/), where one is written

    def __call__(self, *args):
        if self._required <= len(args) < len(self._defaults):  # setup_context reads every argument, defaults too
            args = (*args, *self._defaults[len(args):])
        args = float32_under_cpu_autocast(args, self._list_arguments)  # the CPU kernels take no bfloat16
        if torch.is_autocast_enabled("cuda"):
            args = settled_dtypes(args, self._autocast_arguments)  # the dtypes one CUDA kernel call takes
            # Autocast off inside: a composition's own GEMMs would otherwise run in bfloat16, and its calls of other
            # operators would get mixed dtypes.
            with torch.autocast("cuda", enabled=False):
                return self._dispatch(args)
        return self._dispatch(args)

    def _dispatch(self, args: tuple):
        # The tensors are walked lazily: a call usually needs only the first one (the forward-mode guard returns before
        # reading any outside a dual level, and the C++ path checks requires_grad itself), and the walk over every
        # argument cost about 1 us of a call's 9 on the host.
        first = next(_tensors(args, self._list_arguments), None)
        if first is not None:
            require_device_support(first, self.name)
        refuse_forward_ad(self.name, _tensors(args, self._list_arguments))
        if torch.compiler.is_compiling() or torch._C._are_functorch_transforms_active():
            return self.op(*args)
        if self.native_eager is not None:  # with or without gradients: no Python between here and the kernel
            try:
                return self.native_eager(*args)
            except TypeError:  # pybind11's message for a wrong argument type names no argument; the dispatcher's does
                return self.op(*args)
        if torch.is_grad_enabled() and any(t.requires_grad for t in _tensors(args, self._list_arguments)):
            return self.apply_python_autograd(*args)
        with torch._C._AutoDispatchBelowAutograd():  # no gradient wanted: straight to the device kernel
            return self.op(*args)

    def apply_python_autograd(self, *args):
        """The eager fast path through ``eager_function``, the Python ``autograd.Function``, on the schema's arguments
        (all of them): the path of an operator without a C++ one, and what a C++ one is compared with."""
        sizes = tuple(len(args[i]) if i in self._list_arguments else None for i in range(len(args)))
        return self.eager_function.apply(sizes, *_flatten(args, sizes))


class MissingOperator:
    """Stands for ``torch.ops.mma_nmt.<name>`` when the extension is not built: calling it raises
    :class:`~mma_nmt._extension.ExtensionUnavailableError`, which names the operator and says how to build."""

    def __init__(self, name: str):
        self.name = f"mma_nmt.{name}"

    def __call__(self, *args):
        require_extension(self.name)


def backward_operator(name: str):
    """``torch.ops.mma_nmt.<name>_backward``, or a :class:`MissingOperator` without the extension."""
    if not extension_available():
        return MissingOperator(f"{name}_backward")
    return getattr(torch.ops.mma_nmt, f"{name}_backward")


def register_operator(name: str, *, fake: Callable, backward_fake: Callable, setup_context: Callable,
                      backward: Callable, native_eager: str | None = None,
                      float32_beside_half: tuple[str, ...] = (), weights: tuple[str, ...] = ()) -> RegisteredOperator:
    """Registers ``fake`` for ``mma_nmt::<name>``, ``backward_fake`` for ``mma_nmt::<name>_backward`` and the autograd
    formula ``setup_context(ctx, inputs, output)`` / ``backward(ctx, *grads)`` (guarded by ``first_order_only``) for
    ``mma_nmt::<name>``; returns the callable the operator's Python function calls (a :class:`MissingOperator`
    without the extension). ``native_eager`` names the function of ``mma_nmt._C`` that applies the same formula in
    C++ (``csrc/eager/``); eager calls that need gradients then take it instead of the ``autograd.Function``.
    ``float32_beside_half`` names the arguments (of the operator and its backward) whose kernels read them in float32
    beside half-precision values, which CUDA autocast then leaves in float32, ``weights`` the parameters, which CUDA
    autocast casts to the values' dtype (:class:`mma_nmt.ops.autocast.AutocastArguments`)."""
    if not extension_available():
        return MissingOperator(name)
    torch.library.register_fake(f"mma_nmt::{name}")(fake)
    torch.library.register_fake(f"mma_nmt::{name}_backward")(backward_fake)
    guarded = first_order_only(f"mma_nmt.{name}")(backward)
    _register_guarded_autograd(name, guarded, setup_context)
    register_cpu_autocast(name)
    register_cuda_autocast(name, float32_beside_half, weights)
    native = getattr(extension_module(), native_eager) if native_eager is not None else None
    REGISTERED_OPERATORS[name] = RegisteredOperator(name, setup_context, guarded, native, float32_beside_half,
                                                    weights)
    return REGISTERED_OPERATORS[name]


_LIBRARY = torch.library.Library("mma_nmt", "IMPL")  # holds the autograd kernels registered below


def _register_guarded_autograd(name: str, backward: Callable, setup_context: Callable) -> None:
    """What ``torch.library.register_autograd(f"mma_nmt::{name}", backward, setup_context=setup_context)`` does (the
    same generated kernel, from the same torch internals it uses), behind the checks of forward-mode tangents and of
    ``torch.func`` transforms. Without them a direct call of ``torch.ops.mma_nmt.<name>`` with a tangent returned no
    tangent, silently, and ``torch.func.grad`` failed with a message that named no operator."""
    op = getattr(torch.ops.mma_nmt, name).default
    generated = make_autograd_impl(op, Info(backward, setup_context))
    qualified = f"mma_nmt.{name}"

    def autograd_kernel(keyset, *args, **keyword_only_args):
        tensors = [t for arg in args for t in (arg if isinstance(arg, (list, tuple)) else (arg,))
                   if isinstance(t, torch.Tensor)]
        refuse_forward_ad(qualified, tensors)
        refuse_functorch_gradients(qualified, tensors)
        return generated(keyset, *args, **keyword_only_args)

    _LIBRARY.impl(name, autograd_kernel, "Autograd", with_keyset=True)


def _eager_function(op, setup_context: Callable, backward: Callable) -> type[torch.autograd.Function]:
    """The registered formula as an ``autograd.Function`` whose ``apply(sizes, *flat_args)`` takes the schema's
    arguments with each Tensor[] argument spread out (``sizes[i]``: its length, None for other arguments)."""

    def forward(ctx, sizes, *flat_args):
        inputs = _unflatten(flat_args, sizes)
        with torch._C._AutoDispatchBelowAutograd():
            output = op(*inputs)
        setup_context(ctx, inputs, output)
        ctx.tensor_list_sizes = sizes
        return output

    def backward_flat(ctx, *grads):
        sizes, flat_needs = ctx.tensor_list_sizes, ctx.needs_input_grad
        ctx.needs_input_grad = _unflatten(flat_needs[1:], sizes)  # one entry per schema argument, as the op's
        try:
            grad_inputs = backward(ctx, *grads)
        finally:
            ctx.needs_input_grad = flat_needs
        grad_inputs = tuple(g if n is None or g is not None else [None] * n for g, n in zip(grad_inputs, sizes))
        return None, *_flatten(grad_inputs, sizes)

    name = f"Eager_{op._schema.name.split('::')[1]}"  # its grad_fn is "Eager_<name>Backward"
    return type(name, (torch.autograd.Function,), {"forward": staticmethod(forward),
                                                    "backward": staticmethod(backward_flat)})


def _tensors(args: tuple, list_arguments: tuple[int, ...]) -> Iterator[torch.Tensor]:
    """The tensors among ``args``, those of the Tensor[] arguments at ``list_arguments`` included, in order."""
    for i, arg in enumerate(args):
        if i in list_arguments:
            yield from (t for t in arg if isinstance(t, torch.Tensor))
        elif isinstance(arg, torch.Tensor):
            yield arg


def _flatten(args: tuple, sizes: tuple[int | None, ...]) -> list:
    flat = []
    for arg, size in zip(args, sizes):
        if size is None:
            flat.append(arg)
        else:
            flat.extend(arg)
    return flat


def _unflatten(flat: tuple, sizes: tuple[int | None, ...]) -> tuple:
    args, start = [], 0
    for size in sizes:
        if size is None:
            args.append(flat[start])
            start += 1
        else:
            args.append(list(flat[start:start + size]))
            start += size
    return tuple(args)
