"""Under CUDA autocast an operator's floating-point tensors can disagree in dtype (the GMM module's mixture parameters
in float32 from softmax and exp, its queries in bfloat16 from a projection): the call then takes them all in the
widest dtype (``mma_nmt.ops.autocast``), as autocast's promote ops do. The helper is checked here on CPU tensors; the
CUDA suite runs every operator that way."""

from __future__ import annotations

import pytest
import torch

from mma_nmt.ops.autocast import promoted_to_widest
from mma_nmt.ops.registration import REGISTERED_OPERATORS
from test_ops_cpu_autocast import _leaves, _schema_arguments
from test_operator_registration import CASES


def test_disagreeing_floating_tensors_are_promoted_to_the_widest_in_lists_too():
    q = torch.randn(2, 3, dtype=torch.bfloat16)
    omega = torch.rand(2, 3)
    lengths = torch.tensor([3, 2])
    layers = [torch.randn(2, dtype=torch.float16), torch.randn(2, dtype=torch.bfloat16)]
    got = promoted_to_widest((q, omega, lengths, 0.5, layers), (4,), device_type="cpu")
    assert [t.dtype for t in (got[0], got[1], *got[4])] == [torch.float32] * 4
    assert torch.equal(got[0], q.float()) and got[1] is omega  # values kept; a tensor already widest is not copied
    assert got[2] is lengths and got[3] == 0.5  # integers and scalars are left alone


def test_agreeing_tensors_and_other_devices_are_left_as_they_are():
    args = (torch.randn(2, dtype=torch.bfloat16), torch.randn(2, dtype=torch.bfloat16), torch.tensor([1]))
    assert promoted_to_widest(args, (), device_type="cpu") is args
    mixed = (torch.randn(2, dtype=torch.bfloat16), torch.randn(2))
    assert promoted_to_widest(mixed, (), device_type="cuda") is mixed  # CPU tensors have their own rule
    # bfloat16 and float16 promote to float32, the narrowest dtype holding both
    pair = promoted_to_widest((torch.ones(1, dtype=torch.bfloat16), torch.ones(1, dtype=torch.float16)), (), "cpu")
    assert {t.dtype for t in pair} == {torch.float32}


def _mixed_on_cuda(arguments: tuple) -> tuple[tuple, tuple]:
    """(the first floating tensor in bfloat16 and the others in float32, the same values all in float32), on CUDA, as
    fresh leaves."""
    seen = 0

    def pair(x):
        nonlocal seen
        if isinstance(x, list):
            pairs = [pair(t) for t in x]
            return [a for a, _ in pairs], [b for _, b in pairs]
        if isinstance(x, torch.Tensor) and x.is_floating_point():
            value = x.detach().to("cuda", torch.bfloat16 if seen == 0 else torch.float32)
            seen += 1
            return value.clone().requires_grad_(), value.float().requires_grad_()
        moved = x.to("cuda") if isinstance(x, torch.Tensor) else x
        return moved, moved

    pairs = [pair(x) for x in arguments]
    return tuple(a for a, _ in pairs), tuple(b for _, b in pairs)


def test_an_operator_runs_with_cuda_autocast_off_inside(monkeypatch):
    """Under CUDA autocast the operator's insides (its compositions' GEMMs, its calls of other operators) run with
    autocast off: on the H200 the float32 shared-value composition's matmuls ran in bfloat16 under autocast, and the
    second hop's composition handed the gate operator a bfloat16 projection beside float32 weights. Checked on CPU
    tensors with CUDA autocast switched on by hand."""
    operator = REGISTERED_OPERATORS["attention"]
    real_op, seen = operator.op, []

    def recording_op(*args):
        seen.append(torch.is_autocast_enabled("cuda"))
        return real_op(*args)

    monkeypatch.setattr(operator, "op", recording_op)
    arguments = _schema_arguments("attention")
    previous = torch.is_autocast_enabled("cuda")
    torch.set_autocast_enabled("cuda", True)
    try:
        out = operator(*[x.detach() if isinstance(x, torch.Tensor) else x for x in arguments])[0]
        after = torch.is_autocast_enabled("cuda")
    finally:
        torch.set_autocast_enabled("cuda", previous)
    assert seen == [False] and after, "off inside the call, on again after it"
    assert torch.equal(out, real_op(*arguments)[0])


def _fake_cuda(arguments: tuple) -> tuple:
    """``arguments`` as fake CUDA tensors (inside a FakeTensorMode): the first floating tensor bfloat16, the other
    floating ones float32, the rest their own dtype."""
    seen = 0

    def fake(x):
        nonlocal seen
        if isinstance(x, list):
            return [fake(t) for t in x]
        if not isinstance(x, torch.Tensor):
            return x
        dtype = x.dtype
        if x.is_floating_point():
            dtype = torch.bfloat16 if seen == 0 else torch.float32
            seen += 1
        return torch.empty(x.shape, dtype=dtype, device="cuda")

    return tuple(fake(x) for x in arguments)


@pytest.mark.parametrize("op", list(CASES))
def test_a_direct_call_under_cuda_autocast_takes_the_widest_dtype_with_autocast_off_inside(op, monkeypatch):
    """``torch.ops.mma_nmt.<op>`` called directly, not through the library's function (user code, torch.compile's
    tracing), gets the same rule from the operator's AutocastCUDA kernel: its floating tensors in the widest dtype, the
    operator below with autocast off. Checked without a GPU on fake CUDA tensors, CUDA autocast switched on by hand:
    the fake kernel, where the CUDA kernel would run, records the dtypes it gets, and the promotion, which runs inside
    the autocast-off block, whether autocast is on (inside a fake kernel it always reads off). The backward operators,
    which autograd calls under the autocast state of the backward() call, have the same kernel."""
    from torch._library import simple_registry
    from torch._subclasses.fake_tensor import FakeTensorMode

    from mma_nmt.ops import autocast

    kernel = simple_registry.singleton.find(f"mma_nmt::{op}").fake_impl.kernel
    fake_kernel, promote, seen, promoted_with = kernel.func, autocast.promoted_to_widest, [], []

    def recording(*args, **kwargs):
        tensors = [t for x in args for t in (x if isinstance(x, list) else [x]) if isinstance(t, torch.Tensor)]
        seen.append({t.dtype for t in tensors if t.is_floating_point()})
        return fake_kernel(*args, **kwargs)

    def recording_promotion(*args, **kwargs):
        promoted_with.append(torch.is_autocast_enabled("cuda"))
        return promote(*args, **kwargs)

    monkeypatch.setattr(kernel, "func", recording)
    monkeypatch.setattr(autocast, "promoted_to_widest", recording_promotion)
    arguments = [x.detach() if isinstance(x, torch.Tensor) else x for x in _schema_arguments(op)]
    previous = torch.is_autocast_enabled("cuda")
    with FakeTensorMode():
        mixed = _fake_cuda(tuple(arguments))
        torch.set_autocast_enabled("cuda", True)
        try:
            outputs = getattr(torch.ops.mma_nmt, op).default(*mixed)
        finally:
            torch.set_autocast_enabled("cuda", previous)
    assert seen == [{torch.float32}] and promoted_with == [False]
    assert all(t.dtype == torch.float32 for t in outputs if t.is_floating_point())
    assert torch._C._dispatch_has_kernel_for_dispatch_key(f"mma_nmt::{op}_backward", "AutocastCUDA")


@pytest.mark.cuda
@pytest.mark.parametrize("op", list(CASES))
def test_mixed_dtypes_under_cuda_autocast_compute_in_the_widest(op):
    operator = REGISTERED_OPERATORS[op]
    mixed, as_float = _mixed_on_cuda(_schema_arguments(op))
    with torch.autocast("cuda", dtype=torch.bfloat16):
        outputs = operator(*mixed)
    reference = operator(*as_float)
    for out, expected in zip(outputs, reference):
        if out.is_floating_point():
            assert out.dtype == torch.float32 and torch.equal(out, expected)
    outputs[0].float().sum().backward()
    reference[0].float().sum().backward()
    for leaf, expected in zip(_leaves(mixed), _leaves(as_float)):
        if expected.grad is None:
            continue
        assert leaf.grad is not None and leaf.grad.dtype == leaf.dtype, "gradients reach each input in its dtype"
        assert torch.equal(leaf.grad, expected.grad.to(leaf.dtype))
