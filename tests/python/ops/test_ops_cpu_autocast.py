"""Under CPU autocast (``train.amp = "bf16"`` on the CPU) every operator takes bfloat16 inputs: its CPU kernel computes
in float32 on the inputs cast to float32 (bit for bit what a float32 call gives), and the gradients reach the bfloat16
inputs in bfloat16. Direct calls of ``torch.ops.mma_nmt.*`` cast through the AutocastCPU key alike."""

from __future__ import annotations

import pytest
import torch

from mma_nmt.ops.registration import REGISTERED_OPERATORS
from test_operator_registration import CASES, _RecordSchemaArguments


def _schema_arguments(op: str) -> tuple:
    """The arguments the library passes to operator ``op`` in its float64 test case."""
    call, leaves = CASES[op]()
    with _RecordSchemaArguments() as recorded:
        call(*leaves)
    (arguments,) = recorded.calls
    return arguments


def _as(dtype, arguments: tuple) -> tuple:
    """``arguments`` with each floating tensor (in Tensor[] arguments too) a fresh leaf of ``dtype``."""
    def convert(x):
        if isinstance(x, list):
            return [convert(t) for t in x]
        if isinstance(x, torch.Tensor) and x.is_floating_point():
            return x.detach().to(dtype).requires_grad_()
        return x
    return tuple(convert(x) for x in arguments)


def _leaves(arguments: tuple) -> list[torch.Tensor]:
    flat = [t for x in arguments for t in (x if isinstance(x, list) else [x])]
    return [t for t in flat if isinstance(t, torch.Tensor) and t.requires_grad]


def test_every_registered_operator_is_covered():
    assert sorted(REGISTERED_OPERATORS) == sorted(CASES)


@pytest.mark.parametrize("op", list(CASES))
def test_bf16_inputs_under_cpu_autocast_compute_in_float32(op):
    operator = REGISTERED_OPERATORS[op]
    half = _as(torch.bfloat16, _schema_arguments(op))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        outputs = operator(*half)
    as_float = _as(torch.float32, half)  # the same bfloat16 values, in float32
    reference = operator(*as_float)
    floating = [(out, expected) for out, expected in zip(outputs, reference) if out.is_floating_point()]
    for out, expected in floating:
        assert out.dtype == torch.float32 and torch.equal(out, expected)
    outputs[0].backward(torch.ones_like(outputs[0]))
    reference[0].backward(torch.ones_like(reference[0]))
    for leaf, expected in zip(_leaves(half), _leaves(as_float)):
        assert leaf.grad is not None and leaf.grad.dtype == torch.bfloat16, "gradients reach bfloat16 inputs as such"
        assert torch.equal(leaf.grad, expected.grad.to(torch.bfloat16))


def test_without_autocast_bf16_inputs_are_still_refused_by_the_cpu_kernel():
    with pytest.raises((TypeError, RuntimeError), match="float32 or float64"):
        REGISTERED_OPERATORS["attention"](*_as(torch.bfloat16, _schema_arguments("attention")))


def test_a_direct_operator_call_is_cast_by_the_autocast_key():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, 3, 4, generator=g) for _ in range(3))
    lengths = torch.tensor([3, 2])
    arguments = (lengths, [0, 1], 1, 0.5, 0, 0.0, 0, False)
    expected = torch.ops.mma_nmt.attention(q, k, v, *arguments)[0]
    half = [t.to(torch.bfloat16) for t in (q, k, v)]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = torch.ops.mma_nmt.attention(*half, *arguments)[0]
    assert out.dtype == torch.float32
    assert torch.equal(out, torch.ops.mma_nmt.attention(*(t.float() for t in half), *arguments)[0])
    assert not torch.equal(out, expected)  # the inputs were rounded to bfloat16 first, as autocast asked
