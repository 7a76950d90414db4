"""Under CUDA autocast an operator's floating-point tensors can disagree in dtype (the GMM module's mixture parameters
in float32 from softmax and exp, its queries in bfloat16 from a projection; the multi-hop operators' float32 weights
beside bfloat16 projections): the call then takes its values in the widest of their dtypes (``mma_nmt.ops.autocast``),
as autocast's promote ops do, except the GMM mixture, which stays float32 beside half-precision values, and a
backward's saved statistics, which follow the values. The rule is checked here on CPU tensors; the CUDA suite runs
every operator that way."""

from __future__ import annotations

import pytest
import torch

from mma_nmt.ops.autocast import AutocastArguments, settled_dtypes
from mma_nmt.ops.gmm_attention import MIXTURE_ARGUMENTS
from mma_nmt.ops.registration import REGISTERED_OPERATORS
from test_ops_cpu_autocast import _leaves, _schema_arguments
from test_operator_registration import CASES

BF16, F16, F32, F64 = torch.bfloat16, torch.float16, torch.float32, torch.float64


def test_disagreeing_floating_tensors_are_promoted_to_the_widest_in_lists_too():
    q = torch.randn(2, 3, dtype=BF16)
    omega = torch.rand(2, 3)
    lengths = torch.tensor([3, 2])
    layers = [torch.randn(2, dtype=F16), torch.randn(2, dtype=BF16)]
    got = settled_dtypes((q, omega, lengths, 0.5, layers), AutocastArguments(lists=(4,)), device_type="cpu")
    assert [t.dtype for t in (got[0], got[1], *got[4])] == [F32] * 4
    assert torch.equal(got[0], q.float()) and got[1] is omega  # values kept; a tensor already widest is not copied
    assert got[2] is lengths and got[3] == 0.5  # integers and scalars are left alone


def test_agreeing_tensors_and_other_devices_are_left_as_they_are():
    args = (torch.randn(2, dtype=BF16), torch.randn(2, dtype=BF16), torch.tensor([1]))
    assert settled_dtypes(args, AutocastArguments(), device_type="cpu") is args
    mixed = (torch.randn(2, dtype=BF16), torch.randn(2))
    assert settled_dtypes(mixed, AutocastArguments(), device_type="cuda") is mixed  # CPU tensors have their own rule


def test_float16_beside_bfloat16_takes_autocasts_dtype_as_its_matmuls_would():
    """cuDNN's LSTM returns float16 under any CUDA autocast (torch's AutocastRNN casts to half), so under bfloat16
    autocast the LSTM model's Luong attention gets float16 encoder states (its values) beside bfloat16 queries and
    keys from linear layers. The call takes autocast's dtype, as a matmul would, not float32: the lease of 2026-11-29
    measured that model's step at 0.92x its reference under bfloat16 autocast and 1.09x under float16, where the
    dtypes agree."""
    pair = (torch.ones(1, dtype=BF16), torch.ones(1, dtype=F16))
    assert {t.dtype for t in settled_dtypes(pair, AutocastArguments(), "cpu", half=BF16)} == {BF16}
    assert {t.dtype for t in settled_dtypes(pair, AutocastArguments(), "cpu", half=F16)} == {F16}
    # with float32 among them the widest still wins
    triple = (*pair, torch.ones(1))
    assert {t.dtype for t in settled_dtypes(triple, AutocastArguments(), "cpu", half=BF16)} == {F32}
    luong = AutocastArguments.of(torch.ops.mma_nmt.shared_value_attention.default)
    q, k, v = torch.randn(2, 4, 3, 8, dtype=BF16), torch.randn(2, 4, 5, 8, dtype=BF16), torch.randn(2, 5, 16, dtype=F16)
    got = settled_dtypes((q, k, v, torch.tensor([5, 2]), 0.35, False), luong, "cpu", half=BF16)
    assert _dtypes(got)[:3] == [BF16] * 3 and got[0] is q and torch.equal(got[2], v.to(BF16))


def _gmm_call(values: torch.dtype, mixture: dict[str, torch.dtype] | torch.dtype) -> tuple:
    """mma_nmt::gmm_attention's arguments (B 2, H 2, T 3, S 5, K 2) with q, k, v in ``values`` and the mixture in
    ``mixture`` (one dtype, or one per argument name)."""
    def dtype(name):
        return mixture.get(name, F32) if isinstance(mixture, dict) else mixture

    rows = (2, 2, 3)
    return (torch.randn(*rows, 4, dtype=values), torch.randn(2, 2, 5, 4, dtype=values),
            torch.randn(2, 2, 5, 4, dtype=values), torch.tensor([5, 2]),
            torch.rand(*rows, 2, dtype=dtype("omega")), torch.rand(*rows, 2, dtype=dtype("mu")),
            torch.rand(*rows, 2, dtype=dtype("sigma")), torch.rand(*rows, dtype=dtype("gate")),
            None, None, 0.5, 0, 0.01, False)


_GMM = AutocastArguments.of(torch.ops.mma_nmt.gmm_attention.default, MIXTURE_ARGUMENTS)


def _dtypes(args: tuple) -> list:
    return [a.dtype if isinstance(a, torch.Tensor) and a.is_floating_point() else None for a in args]


def test_the_gmm_mixture_stays_float32_beside_half_precision_values():
    """The GMM module under CUDA autocast: q, k and v from bfloat16 projections, omega, mu and sigma out of softmax and
    exp in float32, the gate out of a sigmoid in bfloat16. The attention keeps bfloat16 (its kernels run in half
    precision) and the mixture float32, the gate with it; a mixture of float32 means is never rounded to bfloat16."""
    args = _gmm_call(BF16, {"gate": BF16})
    got = settled_dtypes(args, _GMM, device_type="cpu")
    assert _dtypes(got)[:8] == [BF16, BF16, BF16, None, F32, F32, F32, F32]
    assert got[0] is args[0] and got[4] is args[4]
    assert settled_dtypes(_gmm_call(F16, F32), _GMM, device_type="cpu")[4].dtype == F32
    # all in one half dtype: left alone (a bfloat16 model, no autocast)
    same = _gmm_call(BF16, BF16)
    assert settled_dtypes(same, _GMM, device_type="cpu") is same
    # values that disagree settle on float32 and the mixture with them; a float64 mixture takes everything to float64
    assert set(_dtypes(settled_dtypes((*_gmm_call(BF16, F32)[:2], torch.randn(2, 2, 5, 4), *_gmm_call(BF16, F32)[3:]),
                                      _GMM, device_type="cpu"))) == {None, F32}
    assert set(_dtypes(settled_dtypes(_gmm_call(BF16, F64), _GMM, device_type="cpu"))) == {None, F64}
    # the rule is the GMM operator's alone: attention-like arguments without it promote the mixture's neighbours
    plain = AutocastArguments.of(torch.ops.mma_nmt.gmm_attention.default)
    assert set(_dtypes(settled_dtypes(_gmm_call(BF16, F32), plain, device_type="cpu"))) == {None, F32}


def test_multihop_weights_take_the_values_dtype_as_autocast_casts_a_linear_layers_weight():
    """The multi-hop module under CUDA autocast: queries and first-hop outputs in bfloat16, its W_b, U_b, U_c and v_b
    float32 parameters. The weights are cast to bfloat16, as autocast casts nn.Linear's, so the operator runs its
    half-precision kernels; before, the whole call went to float32 (the float32 composition)."""
    arguments = AutocastArguments.of(torch.ops.mma_nmt.multihop_second_hop.default,
                                     weights=("w_b", "u_b", "u_c", "v_b"))
    q, a = torch.randn(2, 4, 3, 8, dtype=BF16), torch.randn(2, 4, 3, 8, dtype=BF16)
    weights = (torch.randn(6, 8), torch.randn(4, 6, 8), torch.randn(4, 5, 8), torch.randn(6))
    got = settled_dtypes((q, a, *weights), arguments, device_type="cpu")
    assert _dtypes(got) == [BF16] * 6 and got[0] is q
    assert torch.equal(got[5], weights[3].to(BF16))
    # values that disagree settle on the widest, and the weights with them
    assert _dtypes(settled_dtypes((q, a.float(), *weights), arguments, device_type="cpu")) == [F32] * 6
    # weights alone (no value among the floating tensors) keep the widest of theirs
    lone = settled_dtypes((torch.tensor([1]), weights[0].to(BF16), weights[3]),
                          AutocastArguments(weights=frozenset({1, 2})), device_type="cpu")
    assert _dtypes(lone) == [None, F32, F32]


@pytest.mark.parametrize("op, weights", [("multihop_gate", {"v_b"}), ("multihop_second_hop", {"w_b", "u_b", "u_c", "v_b"})])
def test_a_direct_multihop_call_under_cuda_autocast_runs_in_the_values_half_precision(op, weights, monkeypatch):
    """torch.ops.mma_nmt.<op> called directly under CUDA autocast (fake CUDA tensors, autocast on by hand) with its
    activations in bfloat16 and its parameters in float32: the fake kernel, where the CUDA kernel would run, gets every
    floating tensor in bfloat16."""
    from torch._library import simple_registry
    from torch._subclasses.fake_tensor import FakeTensorMode

    kernel = simple_registry.singleton.find(f"mma_nmt::{op}").fake_impl.kernel
    real, seen = kernel.func, []

    def recording(*args, **kwargs):
        seen.append({d for d in _dtypes(args) if d is not None})
        return real(*args, **kwargs)

    monkeypatch.setattr(kernel, "func", recording)
    schema = getattr(torch.ops.mma_nmt, op).default._schema
    arguments = _schema_arguments(op)
    previous = torch.is_autocast_enabled("cuda")
    with FakeTensorMode():
        fake = tuple(torch.empty(x.shape, dtype=F32 if a.name in weights else BF16, device="cuda")
                     if isinstance(x, torch.Tensor) and x.is_floating_point() else x
                     for a, x in zip(schema.arguments, arguments))
        torch.set_autocast_enabled("cuda", True)
        try:
            getattr(torch.ops.mma_nmt, op).default(*fake)
        finally:
            torch.set_autocast_enabled("cuda", previous)
    assert seen == [{BF16}]


def test_saved_statistics_follow_the_values_and_never_decide_their_dtype():
    """A backward called under autocast: its forward saved lse (and GMM's contexts) in float32 beside bfloat16 values,
    which must not take the whole backward to float32; beside float64 values they go to float64."""
    op = torch.ops.mma_nmt.attention_backward.default
    arguments = AutocastArguments.of(op)
    bf16 = [torch.randn(2, 2, 3, 4, dtype=BF16) for _ in range(5)]  # grad_out, q, k, v, out
    args = (*bf16, torch.randn(2, 2, 3), None, [0, 0], 0, 0.5, 0, 0.0, 0)
    assert settled_dtypes(args, arguments, device_type="cpu") is args
    wide = (*[t.double() for t in bf16], *args[5:])
    assert settled_dtypes(wide, arguments, device_type="cpu")[5].dtype == F64


def test_a_direct_gmm_call_under_cuda_autocast_keeps_half_values_and_a_float32_mixture(monkeypatch):
    """torch.ops.mma_nmt.gmm_attention and its backward called directly under CUDA autocast (fake CUDA tensors, autocast
    switched on by hand): the fake kernels, where the CUDA kernels would run, get q, k and v in bfloat16 and the
    mixture in float32, and the backward returns the mixture's gradients in float32."""
    from torch._library import simple_registry
    from torch._subclasses.fake_tensor import FakeTensorMode

    seen = {}
    for name in ("gmm_attention", "gmm_attention_backward"):
        kernel = simple_registry.singleton.find(f"mma_nmt::{name}").fake_impl.kernel

        def recording(*args, _name=name, _func=kernel.func, **kwargs):
            seen[_name] = _dtypes(args)
            return _func(*args, **kwargs)

        monkeypatch.setattr(kernel, "func", recording)
    previous = torch.is_autocast_enabled("cuda")
    with FakeTensorMode():
        args = tuple(torch.empty(x.shape, dtype=x.dtype, device="cuda") if isinstance(x, torch.Tensor) else x
                     for x in _gmm_call(BF16, {"gate": BF16}))
        torch.set_autocast_enabled("cuda", True)
        try:
            out, lse, log_mass, ctx_a, ctx_b, _, _ = torch.ops.mma_nmt.gmm_attention.default(*args)
            grads = torch.ops.mma_nmt.gmm_attention_backward.default(out, *args[:10], lse, log_mass, ctx_a, ctx_b,
                                                                      *args[10:13])
        finally:
            torch.set_autocast_enabled("cuda", previous)
    assert seen["gmm_attention"][:8] == [BF16, BF16, BF16, None, F32, F32, F32, F32]
    assert seen["gmm_attention_backward"][:9] == [BF16, BF16, BF16, BF16, None, F32, F32, F32, F32]
    assert seen["gmm_attention_backward"][11:15] == [F32] * 4  # lse, log_mass and the contexts as saved
    assert out.dtype == BF16 and [g.dtype for g in grads[:7]] == [BF16] * 3 + [F32] * 4


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
    arguments = _schema_arguments("attention")  # (a call of the library function: before the recording starts)
    real_op, real_native, seen = operator.op, operator.native_eager, []

    def recording(function):  # the eager call's C++ function (or the operator, without one)
        def call(*args):
            seen.append(torch.is_autocast_enabled("cuda"))
            return function(*args)
        return call

    monkeypatch.setattr(operator, "op", recording(real_op))
    if real_native is not None:
        monkeypatch.setattr(operator, "native_eager", recording(real_native))
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
    fake_kernel, promote, seen, promoted_with = kernel.func, autocast.settled_dtypes, [], []

    def recording(*args, **kwargs):
        tensors = [t for x in args for t in (x if isinstance(x, list) else [x]) if isinstance(t, torch.Tensor)]
        seen.append({t.dtype for t in tensors if t.is_floating_point()})
        return fake_kernel(*args, **kwargs)

    def recording_promotion(*args, **kwargs):
        promoted_with.append(torch.is_autocast_enabled("cuda"))
        return promote(*args, **kwargs)

    monkeypatch.setattr(kernel, "func", recording)
    monkeypatch.setattr(autocast, "settled_dtypes", recording_promotion)
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


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [BF16, F16])
def test_gmm_under_cuda_autocast_runs_half_attention_beside_a_float32_mixture(dtype):
    """On a GPU: the GMM operator under autocast with q, k and v in half precision and the mixture in float32 runs the
    half-precision kernels (out in q's dtype, the mixture's gradients in float32) and agrees with the float32 call on
    the same values to half precision's rounding."""
    from mma_nmt.ops.gmm_attention import gmm_attention

    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, n, 16, device="cuda").to(dtype) for n in (5, 40, 40))
    omega, sigma = torch.rand(2, 3, 5, 4, device="cuda") + 0.1, torch.rand(2, 3, 5, 4, device="cuda") + 0.5
    mu, gate = torch.rand(2, 3, 5, 4, device="cuda") * 39, torch.rand(2, 3, 5, device="cuda")
    lengths = torch.tensor([40, 7], device="cuda")
    leaves = [t.clone().requires_grad_() for t in (q, k, v, omega, mu, sigma, gate)]
    as_float = [t.detach().float().requires_grad_() for t in leaves]

    def call(q, k, v, omega, mu, sigma, gate):
        return gmm_attention(q, k, v, omega=omega, mu=mu, sigma=sigma, gate=gate, key_lengths=lengths).out

    with torch.autocast("cuda", dtype=dtype):
        out = call(*leaves)
    expected = call(*as_float)
    assert out.dtype == dtype
    torch.testing.assert_close(out.float(), expected, atol=3e-2, rtol=3e-2)
    grad = torch.randn_like(expected)
    out.backward(grad.to(dtype))
    expected.backward(grad)
    for leaf, reference in zip(leaves, as_float):
        assert leaf.grad.dtype == leaf.dtype
        torch.testing.assert_close(leaf.grad.float(), reference.grad, atol=5e-2, rtol=5e-2)
