"""``mma_nmt::multihop_gate``, the head gate of multi-hop attention's second hop (SPEC section 4): outputs and gradients
against the plain-PyTorch reference, every CPU build, strided inputs, gradcheck, opcheck, empty input and bad input.
Random cases: test_properties_multihop_gate.py."""


import pytest
import torch

from mma_nmt.ops import multihop_gate
from mma_nmt.reference import head_gate_reference

SHAPES = [  # (B, H, T, Db, Dc)
    (2, 4, 5, 8, 8),
    (3, 5, 7, 13, 11),  # odd sizes, Db != Dc
    (1, 1, 1, 1, 1),  # one head: the gate is 1
    (2, 8, 1, 64, 64),  # paper head size, one position
    (1, 3, 67, 17, 33),  # more positions than a kernel block
]


def _inputs(shape, dtype, seed=0):
    batch, heads, length, hop_dim, value_dim = shape
    gen = torch.Generator().manual_seed(seed)
    make = lambda *s: torch.randn(*s, generator=gen, dtype=dtype).requires_grad_()  # noqa: E731
    return (make(batch, heads, length, hop_dim), make(batch, heads, length, hop_dim),
            make(batch, heads, length, value_dim), make(hop_dim))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_head_gate_matches_reference(shape, dtype):
    inputs = _inputs(shape, dtype)
    out, gate = multihop_gate(*inputs)
    ref_out, ref_gate = head_gate_reference(*inputs)
    tol = dict(atol=1e-5, rtol=1e-4) if dtype == torch.float32 else dict(atol=1e-12, rtol=1e-10)
    torch.testing.assert_close(out, ref_out, **tol)
    torch.testing.assert_close(gate, ref_gate, **tol)
    grad_out, grad_gate = torch.randn_like(out), torch.randn_like(gate)
    grads = torch.autograd.grad((out * grad_out).sum() + (gate * grad_gate).sum(), inputs)
    ref_grads = torch.autograd.grad((ref_out * grad_out).sum() + (ref_gate * grad_gate).sum(), inputs)
    for name, got, want in zip(["query_proj", "head_proj", "value_proj", "v_b"], grads, ref_grads):
        torch.testing.assert_close(got, want, **tol, msg=lambda m: f"grad of {name}: {m}")


@pytest.mark.parametrize("isa", ["default", "avx2", "avx512"])
def test_head_gate_every_cpu_build_matches_reference(isa, monkeypatch):
    monkeypatch.setenv("MMA_NMT_CPU_ISA", isa)
    inputs = _inputs((2, 3, 9, 19, 21), torch.float32)
    out, gate = multihop_gate(*inputs)
    ref_out, ref_gate = head_gate_reference(*inputs)
    torch.testing.assert_close(out, ref_out, atol=1e-5, rtol=1e-4)
    grads = torch.autograd.grad(out.square().sum(), inputs)
    ref_grads = torch.autograd.grad(ref_out.square().sum(), inputs)
    for got, want in zip(grads, ref_grads):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_head_gate_reads_strided_slices_in_place():
    """Slices of one (B, H, T, Db + Dc) projection and a transposed (B, T, H, Db) one, as the module passes them."""
    gen = torch.Generator().manual_seed(5)
    both = torch.randn(3, 4, 6, 7 + 5, generator=gen, dtype=torch.float64, requires_grad=True)
    natural = torch.randn(3, 6, 4, 7, generator=gen, dtype=torch.float64, requires_grad=True)
    v_b = torch.randn(7, generator=gen, dtype=torch.float64, requires_grad=True)
    args = (natural.transpose(1, 2), both[..., :7], both[..., 7:], v_b)
    assert not any(a.is_contiguous() for a in args[:3])
    out, gate = multihop_gate(*args)
    ref_out, ref_gate = head_gate_reference(*args)
    torch.testing.assert_close(out, ref_out)
    torch.testing.assert_close(gate, ref_gate)
    got = torch.autograd.grad(out.square().sum() + gate.sum(), (both, natural, v_b))
    want = torch.autograd.grad(ref_out.square().sum() + ref_gate.sum(), (both, natural, v_b))
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)


def test_head_gate_weights_sum_to_one_over_heads():
    _, gate = multihop_gate(*_inputs((3, 8, 6, 16, 16), torch.float64))
    assert (gate > 0).all()
    torch.testing.assert_close(gate.sum(dim=1), torch.ones(3, 6, dtype=torch.float64))


def test_head_gate_only_gradient_flows_through_gate():
    inputs = _inputs((2, 3, 4, 5, 6), torch.float64)
    _, gate = multihop_gate(*inputs)
    _, ref_gate = head_gate_reference(*inputs)
    weights = torch.randn_like(gate)
    got = torch.autograd.grad((gate * weights).sum(), inputs[:2])
    want = torch.autograd.grad((ref_gate * weights).sum(), inputs[:2])
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_head_gate_gradcheck(seed):
    inputs = _inputs((2, 3, 2, 3, 4), torch.float64, seed=seed)
    assert torch.autograd.gradcheck(lambda *x: tuple(multihop_gate(*x)), inputs)


def test_head_gate_opcheck():
    torch.library.opcheck(torch.ops.mma_nmt.multihop_gate.default, _inputs((2, 3, 4, 5, 6), torch.float32))
    torch.library.opcheck(torch.ops.mma_nmt.multihop_gate.default, _inputs((1, 1, 1, 1, 1), torch.float64))


def test_head_gate_empty_input():
    out, gate = multihop_gate(*_inputs((0, 3, 4, 5, 6), torch.float32))
    assert out.shape == (0, 3, 4, 6) and gate.shape == (0, 3, 4)


@pytest.mark.parametrize("change, match", [
    (lambda x: (x[0][0], *x[1:]), "query_proj must have shape"),
    (lambda x: (x[0], x[1][..., :-1], *x[2:]), "head_proj must have shape"),
    (lambda x: (x[0], x[1], x[2][:, :-1], x[3]), "value_proj must have shape"),
    (lambda x: (*x[:3], x[3][:-1]), "v_b must have shape"),
    (lambda x: (x[0], x[1].double(), *x[2:]), "head_proj must have dtype"),
    (lambda x: tuple(t.half() for t in x), "float32 or float64"),
    (lambda x: tuple(t.long() for t in x), "floating-point"),
])
def test_head_gate_rejects_bad_input(change, match):
    inputs = tuple(t.detach() for t in _inputs((2, 3, 4, 5, 6), torch.float32))
    with pytest.raises((ValueError, TypeError, RuntimeError), match=match):
        multihop_gate(*change(inputs))


def test_head_gate_cpu_out_is_position_major_and_gradients_follow_inputs():
    """out is (B, T, H, ·) in memory behind a (B, H, T, ·) view (merging the heads is a view); the projections'
    gradients are laid out like the projections (autograd passes them on without copies); backward reads a strided
    grad_out in place."""
    inputs = _inputs((2, 3, 5, 4, 6), torch.float64)
    out, gate = multihop_gate(*inputs)
    assert out.transpose(1, 2).is_contiguous() and gate.is_contiguous()
    grad_out = torch.randn(2, 5, 3, 6, dtype=torch.float64).transpose(1, 2)  # as merge_heads' backward hands it over
    grads = torch.autograd.grad(out, inputs, grad_out)
    ref_grads = torch.autograd.grad(head_gate_reference(*inputs)[0], inputs, grad_out)
    for got, want in zip(grads, ref_grads):
        torch.testing.assert_close(got, want)
    backward = torch.ops.mma_nmt.multihop_gate_backward
    grad_pre, grad_value, _ = backward(grad_out, None, *(t.detach() for t in inputs), gate.detach())
    assert grad_pre.is_contiguous() and grad_value.is_contiguous()  # like the contiguous inputs
    natural = [t.detach().transpose(1, 2).contiguous().transpose(1, 2) for t in inputs[:3]]  # (B, T, H, ·) buffers
    grad_pre, grad_value, _ = backward(grad_out, None, *natural, inputs[3].detach(), gate.detach())
    assert grad_pre.transpose(1, 2).is_contiguous() and grad_value.transpose(1, 2).is_contiguous()
    permuted = torch.randn(4, 2, 3, 5, dtype=torch.float64).permute(1, 2, 3, 0)  # last dimension outermost
    grad_pre, _, _ = backward(grad_out, None, permuted, permuted, natural[2], inputs[3].detach(), gate.detach())
    assert grad_pre.transpose(1, 2).is_contiguous()  # position-major


@pytest.mark.parametrize("kind", ["expanded", "every_other"])
def test_head_gate_backward_reads_grad_out_with_any_last_stride(kind):
    """A loss like out.sum() hands backward an expanded (stride-0) grad_out; the CPU kernel gathers such rows itself."""
    inputs = _inputs((1, 3, 67, 17, 33), torch.float64)
    gen = torch.Generator().manual_seed(9)
    if kind == "expanded":
        grad_out = torch.randn((), generator=gen, dtype=torch.float64).expand(1, 3, 67, 33)
    else:
        grad_out = torch.randn(1, 3, 67, 66, generator=gen, dtype=torch.float64)[..., ::2]
    assert grad_out.stride(-1) != 1
    out, _ = multihop_gate(*inputs)
    grads = torch.autograd.grad(out, inputs, grad_out)
    ref_grads = torch.autograd.grad(head_gate_reference(*inputs)[0], inputs, grad_out)
    for got, want in zip(grads, ref_grads):
        torch.testing.assert_close(got, want)
