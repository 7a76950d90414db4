"""Every operator is registered through one helper (``mma_nmt/ops/registration.py``, issue 23): eager calls that need
gradients take its fast path (the registered ``setup_context`` and backward as an ``autograd.Function`` around the op
below autograd, or the same formula in C++ where ``csrc/eager/`` has it), calls of the operator itself
(``torch.compile``, ``opcheck``) its ``register_autograd`` formula, and calls without gradients go straight to the
kernel. All give the same results and gradients, bit for bit."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from mma_nmt.ops import (
    fused_attention,
    gmm_attention,
    multihop_gate,
    multihop_second_hop,
    multilayer_attention,
    shared_value_attention,
)
from mma_nmt.ops.registration import REGISTERED_OPERATORS


def _leaves(*shapes, seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*shape, generator=g, dtype=torch.float64).requires_grad_() for shape in shapes]


def _attention():
    lengths = torch.tensor([5, 2])
    return (lambda q, k, v: fused_attention(q, k, v, head_kinds="GL", key_lengths=lengths).out,
            _leaves((2, 2, 3, 4), (2, 2, 5, 4), (2, 2, 5, 3), seed=1))


def _gmm():
    def call(q, k, v, omega, mu, sigma, gate, center, width):
        return gmm_attention(q, k, v, omega=omega.softmax(-1), mu=mu.abs() * 2, sigma=sigma.abs() + 0.5,
                             gate=gate.sigmoid(), local_center=center.abs(), local_width=width.abs() + 1,
                             key_lengths=torch.tensor([5, 2]), normalization="strict").out

    rows = (2, 2, 3)
    return call, _leaves((*rows, 4), (2, 2, 5, 4), (2, 2, 5, 3), (*rows, 2), (*rows, 2), (*rows, 2), rows, rows, rows,
                         seed=2)


def _shared_value():
    return (lambda q, k, v: shared_value_attention(q, k, v, key_lengths=torch.tensor([5, 1])).out,
            _leaves((2, 2, 3, 4), (2, 2, 5, 4), (2, 5, 6), seed=3))


def _multilayer():
    def call(q0, q1, k0, k1, v):  # two layers of (B, T, E), E = 2 heads x 3, joint weights (one summed v)
        return multilayer_attention([q0, q1], [k0, k1], [v], num_heads=2, key_lengths=torch.tensor([4, 2])).out

    return call, _leaves((2, 3, 6), (2, 3, 6), (2, 4, 6), (2, 4, 6), (2, 4, 6), seed=4)


def _head_gate():
    return (lambda query_proj, head_proj, value_proj, v_b: tuple(multihop_gate(query_proj, head_proj, value_proj, v_b)),
            _leaves((2, 3, 4, 5), (2, 3, 4, 5), (2, 3, 4, 6), (5,), seed=5))


def _second_hop():
    return (lambda q, a, w_b, u_b, u_c, v_b: tuple(multihop_second_hop(q, a, w_b, u_b, u_c, v_b)),
            _leaves((2, 3, 4, 5), (2, 3, 4, 5), (6, 5), (3, 6, 5), (3, 7, 5), (6,), seed=6))


CASES = {"attention": _attention, "gmm_attention": _gmm, "shared_value_attention": _shared_value,
         "multilayer_attention": _multilayer, "multihop_gate": _head_gate, "multihop_second_hop": _second_hop}


def _as_tuple(outputs) -> tuple[torch.Tensor, ...]:
    return outputs if isinstance(outputs, tuple) else (outputs,)


class _RecordSchemaArguments(TorchDispatchMode):
    """Records the arguments of every mma_nmt operator call (below autograd, where dispatch modes see them)."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace == "mma_nmt":
            self.calls.append(args)
        return func(*args, **(kwargs or {}))


def _fresh_leaves(args: tuple) -> tuple:
    """``args`` with every tensor replaced by a copy that is a leaf (requiring grad where the tensor did)."""
    def fresh(x):
        if isinstance(x, list):
            return [fresh(t) for t in x]
        return x.detach().clone().requires_grad_(x.requires_grad) if isinstance(x, torch.Tensor) else x
    return tuple(fresh(x) for x in args)


def _leaf_tensors(args: tuple) -> list[torch.Tensor]:
    flat = [t for x in args for t in (x if isinstance(x, list) else [x])]
    return [t for t in flat if isinstance(t, torch.Tensor) and t.requires_grad]


def test_every_operator_is_registered_through_the_helper():
    assert sorted(REGISTERED_OPERATORS) == sorted(CASES)


def test_every_operator_has_its_eager_autograd_in_cpp():
    """Every eager call with gradients takes a ``torch::autograd::Function`` of ``csrc/eager/``: no Python between
    the kernels in forward or backward (benchmarks/bench_registration_path.py)."""
    native = {name for name, operator in REGISTERED_OPERATORS.items() if operator.native_eager is not None}
    assert native == set(REGISTERED_OPERATORS)


def _bad_calls():
    """One call per operator with a C++ autograd whose arguments its checks refuse (a wrong key size or dtype)."""
    def attention(grad):
        q = torch.randn(1, 2, 3, 4, requires_grad=grad)
        return fused_attention(q, torch.randn(1, 2, 5, 3), torch.randn(1, 2, 5, 4), head_kinds="GL")

    def shared_value(grad):
        q = torch.randn(1, 2, 3, 4, requires_grad=grad)
        return shared_value_attention(q, torch.randn(1, 2, 5, 4), torch.randn(1, 5, 6, dtype=torch.float64))

    def gmm(grad):
        q = torch.randn(1, 2, 3, 4, requires_grad=grad)
        k, v = torch.randn(1, 2, 5, 4, dtype=torch.float64), torch.randn(1, 2, 5, 4)
        mixture = torch.rand(1, 2, 3, 2) + 0.5
        return gmm_attention(q, k, v, omega=mixture.softmax(-1), mu=mixture, sigma=mixture, gate=torch.rand(1, 2, 3))

    def multilayer(grad):
        q = torch.randn(1, 3, 6, requires_grad=grad)
        return multilayer_attention([q, torch.randn(1, 3, 6)], [torch.randn(1, 4, 6)], [torch.randn(1, 4, 6)],
                                    num_heads=2)

    def head_gate(grad):
        query_proj = torch.randn(1, 2, 3, 4, requires_grad=grad)
        return multihop_gate(query_proj, torch.randn(1, 2, 3, 5), torch.randn(1, 2, 3, 6), torch.randn(4))

    def second_hop(grad):
        q = torch.randn(1, 2, 3, 4, requires_grad=grad)
        return multihop_second_hop(q, torch.randn(1, 2, 3, 4), torch.randn(5, 4), torch.randn(2, 5, 4), None,
                                   torch.randn(5, dtype=torch.float64))

    return {"attention": attention, "shared_value_attention": shared_value, "gmm_attention": gmm,
            "multilayer_attention": multilayer, "multihop_gate": head_gate, "multihop_second_hop": second_hop}


@pytest.mark.parametrize("op", list(CASES))
def test_cpp_fast_path_raises_the_operators_own_errors(op):
    """Through mma_nmt._C the argument checks raise what a call without gradients raises (ValueError, TypeError, ...
    naming the operator), not a RuntimeError with a C++ backtrace."""
    call = _bad_calls()[op]
    with pytest.raises(Exception) as without_grad:
        call(False)
    with pytest.raises(Exception) as with_grad:
        call(True)
    assert type(with_grad.value) is type(without_grad.value) and type(with_grad.value) is not RuntimeError
    assert str(with_grad.value) == str(without_grad.value)
    assert str(with_grad.value).startswith(f"mma_nmt.{op}: ") and "Exception raised from" not in str(with_grad.value)


@pytest.mark.parametrize("dropout_p", [0.0, 0.4])
def test_cpp_and_python_fast_paths_agree_bit_for_bit_with_dropout_and_padding(dropout_p):
    """The C++ autograd against the Python ``autograd.Function`` of the same formula: outputs and gradients equal, with
    a seeded dropout mask redrawn in backward, key padding and a local head."""
    operator = REGISTERED_OPERATORS["attention"]
    q, k, v = _leaves((2, 2, 3, 4), (2, 2, 5, 4), (2, 2, 5, 3), seed=8)
    args = (q, k, v, torch.tensor([5, 2]), [0, 1], 1, 0.5, 2, dropout_p, 11, True, False)
    python = operator.apply_python_autograd(*args)
    native = operator.native_eager(*args)
    assert native[0].grad_fn.name().startswith("torch::autograd::CppNode<mma_nmt::eager::")
    for a, b in zip(python, native):
        assert torch.equal(a, b)
    cotangent = torch.randn(python[0].shape, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    python_grads = torch.autograd.grad(python[0], (q, k, v), cotangent)
    native_grads = torch.autograd.grad(native[0], (q, k, v), cotangent)
    for a, b in zip(python_grads, native_grads):
        assert torch.equal(a, b)
    assert not native[1].requires_grad and not native[2].requires_grad, "lse and the weights are not differentiable"


def _schema_arguments(call, leaves) -> tuple:
    with _RecordSchemaArguments() as recorded:
        call(*leaves)
    (schema_args,) = recorded.calls
    return schema_args


def _with_defaults(operator, args: tuple) -> tuple:
    """``args`` with the trailing arguments the dispatcher left out (those equal to their default) put back: the
    fast paths take every argument of the schema."""
    return (*args, *(argument.default_value for argument in operator.op._schema.arguments[len(args):]))


def _other_cases():
    """Schema arguments the CASES do not reach: the second hop without u_c, multi-layer attention with
    layer-specific weights, one value set per layer and the weights asked for."""
    q, a, w_b, u_b, v_b = _leaves((2, 3, 4, 5), (2, 3, 4, 5), (6, 5), (3, 6, 5), (6,), seed=12)
    second_hop = (q, a, w_b, u_b, None, v_b)
    layers = _leaves((2, 3, 6), (2, 3, 6), (2, 4, 6), (2, 4, 6), (2, 4, 4), (2, 4, 4), seed=13)
    multilayer = (layers[:2], layers[2:4], layers[4:], torch.tensor([4, 1]), 2, 0.7, True, True)
    return [("multihop_second_hop", second_hop), ("multilayer_attention", multilayer)]


def _differentiable_subsets(outputs) -> list[tuple[int, ...]]:
    """Each differentiable output alone, and all of them: a gate without a gradient reaches the C++ backward as
    None where the Python one got zeros, an out without one as zeros."""
    indices = tuple(i for i, out in enumerate(outputs) if out.requires_grad)
    return [(i,) for i in indices] + ([indices] if len(indices) > 1 else [])


@pytest.mark.parametrize("case", [*(op for op in CASES), *(f"{op}:other" for op, _ in _other_cases())])
def test_cpp_and_python_fast_paths_agree_bit_for_bit_for_each_output(case):
    """The C++ autograd of every operator against the Python ``autograd.Function`` of the same formula: outputs equal,
    and gradients equal whichever differentiable outputs the loss reads."""
    op = case.split(":")[0]
    if case.endswith(":other"):
        (args,) = [args for name, args in _other_cases() if name == op]
    else:
        args = _schema_arguments(*CASES[op]())
    operator = REGISTERED_OPERATORS[op]
    args = _with_defaults(operator, args)
    subsets = _differentiable_subsets(operator.native_eager(*_fresh_leaves(args)))
    for subset in subsets:
        python_args, native_args = _fresh_leaves(args), _fresh_leaves(args)
        python, native = operator.apply_python_autograd(*python_args), operator.native_eager(*native_args)
        assert native[0].grad_fn.name().startswith("torch::autograd::CppNode<mma_nmt::eager::"), native[0].grad_fn
        assert len(python) == len(native)
        for a, b in zip(python, native):
            assert torch.equal(a, b) and a.requires_grad == b.requires_grad
        g = torch.Generator().manual_seed(10)
        cotangents = [torch.randn(python[i].shape, generator=g, dtype=python[i].dtype) for i in subset]
        leaves = _leaf_tensors(python_args)
        python_grads = torch.autograd.grad([python[i] for i in subset], leaves, cotangents, allow_unused=True)
        native_grads = torch.autograd.grad([native[i] for i in subset], _leaf_tensors(native_args), cotangents,
                                           allow_unused=True)
        assert any(grad is not None for grad in native_grads)
        for leaf, a, b in zip(leaves, python_grads, native_grads):
            a = torch.zeros_like(leaf) if a is None else a  # an unused input: None from one path, 0 from the other
            b = torch.zeros_like(leaf) if b is None else b
            assert torch.equal(a, b), (subset, leaf.shape)


@pytest.mark.parametrize("op", list(CASES))
def test_eager_calls_with_gradients_take_the_fast_path(op):
    call, leaves = CASES[op]()
    out = _as_tuple(call(*leaves))[0]
    if REGISTERED_OPERATORS[op].native_eager is not None:  # the C++ autograd of csrc/eager/
        assert out.grad_fn.name().startswith("torch::autograd::CppNode<mma_nmt::eager::"), out.grad_fn.name()
    else:
        assert type(out.grad_fn).__name__ == f"Eager_{op}Backward"
    assert all(leaf.grad is None for leaf in leaves)
    out.backward(torch.ones_like(out))
    assert all(leaf.grad is not None for leaf in leaves), "every leaf gets a gradient (Tensor[] arguments included)"


@pytest.mark.parametrize("op", list(CASES))
def test_fast_path_matches_the_registered_autograd_bit_for_bit(op):
    schema_args = _schema_arguments(*CASES[op]())
    operator = REGISTERED_OPERATORS[op]
    fast_args, registered_args = _fresh_leaves(schema_args), _fresh_leaves(schema_args)
    fast, registered = operator(*fast_args), operator.op(*registered_args)
    assert type(registered[0].grad_fn).__name__.startswith("GeneratedBackwardFor_mma_nmt_"), "torch.library's path"
    g = torch.Generator().manual_seed(7)
    cotangents = [torch.randn(out.shape, generator=g, dtype=out.dtype) for out in fast if out.requires_grad]
    fast_grads = torch.autograd.grad([out for out in fast if out.requires_grad], _leaf_tensors(fast_args), cotangents)
    registered_grads = torch.autograd.grad([out for out in registered if out.requires_grad],
                                           _leaf_tensors(registered_args), cotangents)
    assert len(fast_grads) == len(registered_grads) > 0
    for a, b in zip((*fast, *fast_grads), (*registered, *registered_grads)):
        assert torch.equal(a, b)


@pytest.mark.parametrize("op", list(CASES))
def test_calls_without_gradients_skip_autograd_with_the_same_results(op):
    call, leaves = CASES[op]()
    eager = _as_tuple(call(*leaves))
    with torch.no_grad():
        no_grad = _as_tuple(call(*leaves))
    detached = _as_tuple(call(*(leaf.detach() for leaf in leaves)))
    for with_grad, without, plain in zip(eager, no_grad, detached):
        assert without.grad_fn is None and plain.grad_fn is None
        assert torch.equal(with_grad, without) and torch.equal(with_grad, plain)
