"""mma_nmt::multihop_second_hop: the whole second hop of multi-hop attention (SPEC section 4), projections included,
against the plain-PyTorch formula (``second_hop_reference``)."""

import pytest
import torch

from mma_nmt.ops import multihop_second_hop
from mma_nmt.reference import second_hop_reference

SHAPES = [  # (B, H, T, D, Db, Dc); Dc = None: no u_c (out_h = beta_h a_h)
    (2, 4, 5, 8, 8, 8),
    (3, 5, 7, 13, 11, 9),  # odd sizes, Db != Dc != D
    (2, 3, 5, 7, 5, None),
    (1, 1, 1, 1, 1, 1),  # one head (the gate is 1), one position, sizes 1
    (2, 8, 1, 64, 64, 64),  # paper head size, one position per sentence
    (3, 2, 23, 17, 33, 5),  # 69 positions: blocks of 32 and a partial one, blocks across sentences
    (1, 3, 67, 5, 19, None),
]
FORWARD = torch.ops.mma_nmt.multihop_second_hop.default
BACKWARD = torch.ops.mma_nmt.multihop_second_hop_backward.default
NAMES = ["q", "a", "w_b", "u_b", "u_c", "v_b"]


def _inputs(shape, dtype, seed=0, scale=1.0):
    batch, heads, length, dim, hop_dim, value_dim = shape
    gen = torch.Generator().manual_seed(seed)
    make = lambda *s, m=1.0: (m * torch.randn(*s, generator=gen, dtype=dtype)).requires_grad_()  # noqa: E731
    u_c = None if value_dim is None else make(heads, value_dim, dim, m=dim**-0.5)
    # q as the module passes it: a head view of a (B, T, E) projection, position-major
    q = (scale * torch.randn(batch, length, heads, dim, generator=gen, dtype=dtype)).transpose(1, 2).requires_grad_()
    return dict(q=q, a=make(batch, heads, length, dim, m=scale), w_b=make(hop_dim, dim, m=dim**-0.5),
                u_b=make(heads, hop_dim, dim, m=dim**-0.5), u_c=u_c, v_b=make(hop_dim))


def _leaves(args):
    return [t for t in args.values() if t is not None]


def _check_against_reference(args, tol, grad_out_like=None):
    out, gate = multihop_second_hop(**args)
    ref_out, ref_gate = second_hop_reference(args["q"], args["a"], args["w_b"], args["v_b"], args["u_b"], args["u_c"])
    torch.testing.assert_close(out, ref_out, **tol)
    torch.testing.assert_close(gate, ref_gate, **tol)
    gen = torch.Generator().manual_seed(1)
    grad_out = torch.randn(out.shape, generator=gen, dtype=out.dtype) if grad_out_like is None else grad_out_like
    grad_gate = torch.randn(gate.shape, generator=gen, dtype=gate.dtype)
    leaves = _leaves(args)
    grads = torch.autograd.grad((out, gate), leaves, (grad_out, grad_gate))
    ref_grads = torch.autograd.grad((ref_out, ref_gate), leaves, (grad_out, grad_gate))
    names = [n for n in NAMES if args[n] is not None]
    for name, got, want in zip(names, grads, ref_grads):
        torch.testing.assert_close(got, want, **tol, msg=lambda m: f"grad of {name}: {m}")


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_second_hop_matches_reference(shape, dtype):
    tol = dict(atol=2e-5, rtol=1e-4) if dtype == torch.float32 else dict(atol=1e-12, rtol=1e-10)
    _check_against_reference(_inputs(shape, dtype), tol)


@pytest.mark.parametrize("isa", ["default", "avx2", "avx512"])
@pytest.mark.parametrize("value_dim", [21, None])
def test_second_hop_every_cpu_build_matches_reference(isa, value_dim, monkeypatch):
    monkeypatch.setenv("MMA_NMT_CPU_ISA", isa)
    _check_against_reference(_inputs((2, 3, 19, 19, 13, value_dim), torch.float64),
                             dict(atol=1e-12, rtol=1e-10))


def test_second_hop_saturated_tanh_and_one_hot_gate():
    """Pre-activations of ~1e2 (tanh is +-1, its derivative underflows) and v_b of 1e3 (the gate is one-hot)."""
    args = _inputs((2, 4, 9, 6, 7, 5), torch.float64, scale=30.0)
    with torch.no_grad():
        args["v_b"].mul_(1e3)
    _check_against_reference(args, dict(atol=1e-9, rtol=1e-9))


def test_second_hop_reads_strided_views_in_place():
    """q and a as slices of wider buffers (only the last dimension contiguous), as views of other projections."""
    gen = torch.Generator().manual_seed(5)
    wide = torch.randn(3, 4, 6, 2 * 7 + 3, generator=gen, dtype=torch.float64, requires_grad=True)
    args = _inputs((3, 4, 6, 7, 5, 3), torch.float64)
    args["q"], args["a"] = wide[..., 1:8], wide[..., 9:16]
    assert not args["q"].is_contiguous() and not args["a"].is_contiguous()
    _check_against_reference(args, dict(atol=1e-12, rtol=1e-10))


@pytest.mark.parametrize("kind", ["expanded", "every_other", "transposed"])
def test_second_hop_backward_reads_grad_out_with_any_strides(kind):
    """out.sum() hands backward an expanded (stride-0) grad_out; merge_heads' backward a (B, T, H, ·) one."""
    args = _inputs((2, 3, 23, 5, 6, 7), torch.float64)
    gen = torch.Generator().manual_seed(9)
    if kind == "expanded":
        grad_out = torch.randn((), generator=gen, dtype=torch.float64).expand(2, 3, 23, 7)
    elif kind == "every_other":
        grad_out = torch.randn(2, 3, 23, 14, generator=gen, dtype=torch.float64)[..., ::2]
    else:
        grad_out = torch.randn(2, 23, 3, 7, generator=gen, dtype=torch.float64).transpose(1, 2)
    _check_against_reference(args, dict(atol=1e-12, rtol=1e-10), grad_out_like=grad_out)


def test_second_hop_outputs_are_position_major_and_hidden_is_the_tanh():
    args = _inputs((2, 3, 5, 4, 6, 7), torch.float64)
    plain = {n: (None if t is None else t.detach()) for n, t in args.items()}
    out, gate, hidden = FORWARD(*plain.values())
    assert out.shape == (2, 3, 5, 7) and out.transpose(1, 2).is_contiguous()  # merging the heads is a view
    assert hidden.shape == (2, 3, 5, 6) and hidden.transpose(1, 2).is_contiguous()
    assert gate.is_contiguous()
    pre = torch.einsum("bhtd,ed->bhte", plain["q"], plain["w_b"]) + torch.einsum("bhtd,hed->bhte", plain["a"],
                                                                                  plain["u_b"])
    torch.testing.assert_close(hidden, torch.tanh(pre))
    torch.testing.assert_close(gate.sum(1), torch.ones(2, 5, dtype=torch.float64))


def test_second_hop_gradients_are_repeatable():
    """The weight gradients are summed per chunk of blocks in a fixed order: the same call gives the same bits."""
    args = _inputs((4, 8, 33, 16, 16, 16), torch.float32)
    out, gate = multihop_second_hop(**args)
    first = torch.autograd.grad(out.square().sum() + gate.sum(), _leaves(args), retain_graph=True)
    second = torch.autograd.grad(out.square().sum() + gate.sum(), _leaves(args))
    for x, y in zip(first, second):
        assert torch.equal(x, y)


@pytest.mark.parametrize("value_dim", [4, None])
@pytest.mark.parametrize("seed", [0, 1])
def test_second_hop_gradcheck(value_dim, seed):
    args = _inputs((2, 3, 3, 3, 5, value_dim), torch.float64, seed=seed)
    names = [n for n in NAMES if args[n] is not None]

    def call(*leaves):
        kwargs = dict(zip(names, leaves), u_c=None) if value_dim is None else dict(zip(names, leaves))
        return tuple(multihop_second_hop(**kwargs))

    assert torch.autograd.gradcheck(call, tuple(args[n] for n in names))


@pytest.mark.parametrize("shape", [(2, 3, 4, 5, 6, 7), (1, 1, 1, 1, 1, None), (3, 2, 13, 3, 2, 1)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_second_hop_opcheck(shape, dtype):
    torch.library.opcheck(FORWARD, tuple(_inputs(shape, dtype).values()))


def test_second_hop_empty_batch():
    args = _inputs((0, 3, 4, 5, 6, 7), torch.float32)
    out, gate = multihop_second_hop(**args)
    assert out.shape == (0, 3, 4, 7) and gate.shape == (0, 3, 4)
    grads = torch.autograd.grad(out.sum() + gate.sum(), _leaves(args), allow_unused=True)
    assert [tuple(g.shape) for g in grads] == [(0, 3, 4, 5), (0, 3, 4, 5), (6, 5), (3, 6, 5), (3, 7, 5), (6,)]
    assert not any(g.any() for g in grads)


def _plain(shape=(2, 3, 4, 5, 6, 7)):
    return {n: (None if t is None else t.detach()) for n, t in _inputs(shape, torch.float32).items()}


META = dict(device="meta")


@pytest.mark.parametrize("changes, match", [
    (dict(q=torch.zeros(2, 3, 4)), "q must have shape"),
    (dict(a=torch.zeros(2, 3, 4, 4)), "a must have shape"),
    (dict(a=torch.zeros(2, 2, 4, 5)), "a must have shape"),
    (dict(w_b=torch.zeros(6)), "w_b must have shape"),
    (dict(w_b=torch.zeros(6, 4)), "w_b must have shape"),
    (dict(u_b=torch.zeros(3, 5, 5)), "u_b must have shape"),
    (dict(u_b=torch.zeros(2, 6, 5)), "u_b must have shape"),
    (dict(u_c=torch.zeros(3, 7)), "u_c must have shape"),
    (dict(u_c=torch.zeros(3, 7, 4)), "u_c must have shape"),
    (dict(u_c=torch.zeros(3, 0, 5)), "u_c must have at least one row"),
    (dict(v_b=torch.zeros(5)), "v_b must have shape"),
    (dict(a=torch.zeros(2, 3, 4, 5, dtype=torch.float64)), "a must have dtype"),
    (dict(u_b=torch.zeros(3, 6, 5, dtype=torch.float64)), "u_b must have dtype"),
    (dict(v_b=torch.zeros(6, dtype=torch.int64)), "v_b must have dtype"),
    (dict(q=torch.zeros(2, 3, 4, 5, dtype=torch.int64)), "floating-point"),
    (dict(q=torch.zeros(2, 3, 4, 5, dtype=torch.bfloat16), a=torch.zeros(2, 3, 4, 5, dtype=torch.bfloat16),
          w_b=torch.zeros(6, 5, dtype=torch.bfloat16), u_b=torch.zeros(3, 6, 5, dtype=torch.bfloat16),
          u_c=torch.zeros(3, 7, 5, dtype=torch.bfloat16), v_b=torch.zeros(6, dtype=torch.bfloat16)),
     "float32 or float64"),
    (dict(q=torch.zeros(2, 3, 4, 0), a=torch.zeros(2, 3, 4, 0), w_b=torch.zeros(6, 0), u_b=torch.zeros(3, 6, 0),
          u_c=torch.zeros(3, 7, 0)), "head_dim and hop_dim must be at least 1"),
    (dict(q=torch.zeros(1, 65, 1, 5), a=torch.zeros(1, 65, 1, 5), u_b=torch.zeros(65, 6, 5),
          u_c=torch.zeros(65, 7, 5)), "heads"),
    (dict(a=torch.zeros(2, 3, 4, 5, **META)), "a is on meta"),
    (dict(u_c=torch.zeros(3, 7, 5, **META)), "u_c is on meta"),
])
def test_second_hop_rejects_bad_input(changes, match):
    args = {**_plain(), **changes}
    with pytest.raises((ValueError, TypeError, RuntimeError), match=match):
        FORWARD(*args.values())


def _good_backward():
    args = _plain()
    out, gate, hidden = FORWARD(*args.values())
    return dict(grad_out=torch.randn_like(out), grad_gate=torch.randn_like(gate), **args, gate=gate, hidden=hidden)


@pytest.mark.parametrize("changes, match", [
    (dict(grad_out=torch.zeros(2, 3, 4, 6)), "grad_out must have shape"),
    (dict(grad_out=torch.zeros(2, 3, 4, 7, dtype=torch.float64)), "grad_out must have dtype"),
    (dict(grad_out=torch.zeros(2, 3, 4, 7, **META)), "grad_out is on meta"),
    (dict(grad_gate=torch.zeros(2, 3)), "grad_gate must have shape"),
    (dict(gate=torch.zeros(2, 3, 5)), "gate must have shape"),
    (dict(hidden=torch.zeros(2, 3, 4, 5)), "hidden must have shape"),
    (dict(hidden=torch.zeros(2, 3, 4, 6, dtype=torch.float64)), "hidden must have dtype"),
    (dict(u_c=None), "grad_out must have shape"),  # without u_c, grad_out is (B, H, T, D)
    (dict(v_b=torch.zeros(5)), "v_b must have shape"),
])
def test_second_hop_backward_rejects_bad_input(changes, match):
    args = {**_good_backward(), **changes}
    with pytest.raises((ValueError, TypeError, RuntimeError), match=match):
        BACKWARD(*args.values())


def test_second_hop_reference_follows_spec_per_head():
    gen = torch.Generator().manual_seed(3)
    batch, heads, length, dim, hop = 2, 3, 4, 5, 6
    q, a = torch.randn(2, batch, heads, length, dim, generator=gen, dtype=torch.float64)
    w_b = torch.randn(hop, dim, generator=gen, dtype=torch.float64)
    v_b = torch.randn(hop, generator=gen, dtype=torch.float64)
    u_b = torch.randn(heads, hop, dim, generator=gen, dtype=torch.float64)
    u_c = torch.randn(heads, dim, dim, generator=gen, dtype=torch.float64)
    out, beta = second_hop_reference(q, a, w_b, v_b, u_b, u_c)
    e = torch.stack([torch.tanh(q[:, h] @ w_b.T + a[:, h] @ u_b[h].T) @ v_b for h in range(heads)], dim=1)
    expected_beta = torch.exp(e) / torch.exp(e).sum(dim=1, keepdim=True)
    torch.testing.assert_close(beta, expected_beta)
    for h in range(heads):
        torch.testing.assert_close(out[:, h], expected_beta[:, h, :, None] * (a[:, h] @ u_c[h].T))
