"""``mma_nmt::shared_value_attention``, the step of multi-head Luong attention (SPEC section 2: per-head queries and
keys, one value shared by the heads): outputs and gradients against the plain-PyTorch reference on odd shapes and
padding, every CPU build, sentences without keys, gradcheck, opcheck and bad input. Random cases:
test_properties_shared_value_attention.py."""


import pytest
import torch

from mma_nmt.ops import shared_value_attention
from mma_nmt.reference import shared_value_attention_reference

SHAPES = [  # (B, H, T, S, D, Dv)
    (2, 4, 1, 9, 16, 16),  # one decoder step
    (3, 3, 5, 7, 13, 11),  # odd sizes, D != Dv, all steps at once
    (1, 1, 1, 1, 1, 1),
    (2, 2, 3, 33, 40, 24),
]


def _inputs(shape, dtype, seed=0):
    batch, heads, steps, src_len, dim, value_dim = shape
    gen = torch.Generator().manual_seed(seed)
    make = lambda *s: torch.randn(*s, generator=gen, dtype=dtype).requires_grad_()  # noqa: E731
    return make(batch, heads, steps, dim), make(batch, heads, src_len, dim), make(batch, src_len, value_dim)


def _lengths(batch, src_len):
    return torch.tensor([src_len, max(1, src_len // 2), 1][:batch])


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("padded", [False, True])
def test_shared_value_attention_matches_reference(shape, dtype, padded):
    q, k, v = _inputs(shape, dtype)
    lengths = _lengths(shape[0], shape[3]) if padded else None
    result = shared_value_attention(q, k, v, key_lengths=lengths, scale=0.3, return_probs=True)
    ref_out, ref_probs = shared_value_attention_reference(q, k, v, key_lengths=lengths, scale=0.3)
    tol = dict(atol=1e-5, rtol=1e-4) if dtype == torch.float32 else dict(atol=1e-12, rtol=1e-10)
    torch.testing.assert_close(result.out, ref_out, **tol)
    torch.testing.assert_close(result.probs, ref_probs, **tol)
    grad = torch.randn_like(ref_out)
    grads = torch.autograd.grad((result.out * grad).sum(), (q, k, v))
    ref_grads = torch.autograd.grad((ref_out * grad).sum(), (q, k, v))
    for name, got, want in zip("qkv", grads, ref_grads):
        torch.testing.assert_close(got, want, **tol, msg=lambda m: f"grad of {name}: {m}")


@pytest.mark.parametrize("isa", ["default", "avx2", "avx512"])
def test_every_cpu_build_matches_reference(isa, monkeypatch):
    monkeypatch.setenv("MMA_NMT_CPU_ISA", isa)
    q, k, v = _inputs((2, 3, 2, 11, 21, 19), torch.float32)
    lengths = torch.tensor([11, 6])
    out = shared_value_attention(q, k, v, key_lengths=lengths).out
    ref_out, _ = shared_value_attention_reference(q, k, v, key_lengths=lengths)
    torch.testing.assert_close(out, ref_out, atol=1e-5, rtol=1e-4)
    got = torch.autograd.grad(out.square().sum(), (q, k, v))
    want = torch.autograd.grad(ref_out.square().sum(), (q, k, v))
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, atol=1e-4, rtol=1e-4)


def test_sentence_without_keys_gives_zero_output_and_gradient():
    q, k, v = _inputs((2, 2, 1, 4, 3, 5), torch.float64)
    result = shared_value_attention(q, k, v, key_lengths=torch.tensor([4, 0]))
    assert torch.equal(result.out[1], torch.zeros_like(result.out[1]))
    assert torch.isinf(result.lse[1]).all()
    grads = torch.autograd.grad(result.out.sum(), (q, k, v))
    assert all(torch.isfinite(g).all() for g in grads)
    assert torch.equal(grads[0][1], torch.zeros_like(grads[0][1]))


def test_padding_mask_equals_lengths():
    q, k, v = _inputs((3, 2, 2, 6, 4, 4), torch.float64)
    lengths = torch.tensor([6, 3, 1])
    mask = torch.arange(6).unsqueeze(0) >= lengths.unsqueeze(1)
    torch.testing.assert_close(shared_value_attention(q, k, v, key_padding_mask=mask).out,
                               shared_value_attention(q, k, v, key_lengths=lengths).out)


@pytest.mark.parametrize("seed", [0, 1])
def test_shared_value_attention_gradcheck(seed):
    q, k, v = _inputs((2, 2, 2, 4, 3, 5), torch.float64, seed=seed)
    lengths = torch.tensor([4, 2])
    assert torch.autograd.gradcheck(
        lambda q, k, v: shared_value_attention(q, k, v, key_lengths=lengths, scale=0.7).out, (q, k, v))


def test_shared_value_attention_opcheck():
    q, k, v = _inputs((2, 3, 1, 5, 4, 6), torch.float32)
    op = torch.ops.mma_nmt.shared_value_attention.default
    torch.library.opcheck(op, (q, k, v, torch.tensor([5, 2]), 1.0, False))
    torch.library.opcheck(op, (q, k, v, None, 0.5, True))


@pytest.mark.parametrize("change, match", [
    (lambda q, k, v, n: (q[0], k, v, n), "q must have shape"),
    (lambda q, k, v, n: (q, k, v.unsqueeze(1), n), "v must have shape"),
    (lambda q, k, v, n: (q, k[:, :1], v, n), "k must have shape"),
    (lambda q, k, v, n: (q, k, v[:, :-1], n), "v must have shape"),
    (lambda q, k, v, n: (q, k.double(), v, n), "k must have dtype"),
    (lambda q, k, v, n: (q, k, v, torch.tensor([1, 9])), "key_lengths must lie in"),
    (lambda q, k, v, n: (q, k, v, torch.tensor([1])), "key_lengths must have shape"),
    (lambda q, k, v, n: (q.half(), k.half(), v.half(), n), "float32 or float64"),
])
def test_shared_value_attention_rejects_bad_input(change, match):
    q, k, v = (t.detach() for t in _inputs((2, 3, 1, 5, 4, 6), torch.float32))
    q, k, v, lengths = change(q, k, v, torch.tensor([5, 2]))
    with pytest.raises((ValueError, TypeError, RuntimeError), match=match):
        shared_value_attention(q, k, v, key_lengths=lengths)
