"""Bad calls of ``mma_nmt::shared_value_attention`` and ``mma_nmt::shared_value_attention_backward`` (direct calls
included, which autograd never makes) raise errors that name the argument and what was expected."""

from __future__ import annotations

import pytest
import torch

from mma_nmt.ops import shared_value_attention
from mma_nmt.reference import shared_value_attention_reference

FORWARD = torch.ops.mma_nmt.shared_value_attention.default
BACKWARD = torch.ops.mma_nmt.shared_value_attention_backward.default


def _good():
    gen = torch.Generator().manual_seed(5)
    q, k = torch.randn(2, 3, 4, 5, generator=gen), torch.randn(2, 3, 7, 5, generator=gen)
    v = torch.randn(2, 7, 6, generator=gen)
    return dict(q=q, k=k, v=v, key_lengths=torch.tensor([7, 2]), scale=0.5, return_probs=False)


def _good_backward():
    args = _good()
    out, lse, _ = FORWARD(*args.values())
    return dict(grad_out=torch.randn_like(out), q=args["q"], k=args["k"], v=args["v"], out=out, lse=lse,
                key_lengths=args["key_lengths"], scale=0.5)


META = dict(device="meta")


@pytest.mark.parametrize("changes, match", [
    (dict(q=torch.zeros(())), "q must have shape"),
    (dict(k=torch.zeros(2, 3, 7)), "k must have shape"),
    (dict(k=torch.zeros(2, 3, 7, 5, 1)), "k must have shape"),
    (dict(v=torch.zeros(2, 3, 7, 6)), "v must have shape"),
    (dict(k=torch.zeros(3, 3, 7, 5)), "k must have shape"),
    (dict(k=torch.zeros(2, 3, 7, 4)), "k must have shape"),
    (dict(v=torch.zeros(1, 7, 6)), "v must have shape"),
    (dict(v=torch.zeros(2, 7, 6, dtype=torch.float64)), "v must have dtype"),
    (dict(q=torch.zeros(2, 3, 4, 5, dtype=torch.int64)), "floating-point"),
    (dict(q=torch.zeros(2, 3, 4, 5, dtype=torch.bfloat16), k=torch.zeros(2, 3, 7, 5, dtype=torch.bfloat16),
          v=torch.zeros(2, 7, 6, dtype=torch.bfloat16)), "float32 or float64"),
    (dict(k=torch.zeros(2, 3, 7, 5, **META)), "k is on meta"),
    (dict(v=torch.zeros(2, 7, 6, **META)), "v is on meta"),
    (dict(key_lengths=torch.tensor([7, 2], **META)), "key_lengths is on meta"),
    (dict(key_lengths=torch.tensor([-1, 2])), "key_lengths must lie in"),
    (dict(key_lengths=torch.tensor([-(2**63), 2])), "key_lengths must lie in"),
    (dict(key_lengths=torch.tensor([2**63 - 1, 2])), "key_lengths must lie in"),
    (dict(key_lengths=torch.tensor([7, 2], dtype=torch.int32)), "key_lengths must be int64"),
    (dict(key_lengths=torch.tensor([7.0, 2.0])), "key_lengths must be int64"),
    (dict(key_lengths=torch.tensor(7)), "key_lengths must have shape"),
    (dict(key_lengths=torch.tensor([[7, 2]])), "key_lengths must have shape"),
    (dict(key_lengths=torch.zeros(0, dtype=torch.int64)), "key_lengths must have shape"),
    (dict(scale=0.0), "scale must be positive"),
    (dict(scale=-1.0), "scale must be positive"),
    (dict(scale=float("nan")), "scale must be positive"),
    (dict(scale=float("inf")), "scale must be positive"),
])
def test_forward_rejects_bad_input(changes, match):
    args = {**_good(), **changes}
    with pytest.raises((ValueError, TypeError, RuntimeError), match=match):
        FORWARD(*args.values())


def test_functional_api_rejects_mismatched_padding_arguments():
    args = _good()
    with pytest.raises(ValueError, match="key_padding_mask"):
        shared_value_attention(args["q"], args["k"], args["v"], key_padding_mask=torch.zeros(2, 7))
    with pytest.raises(ValueError, match="key_padding_mask"):
        holes = torch.tensor([[False, True] * 3 + [False]] * 2)
        shared_value_attention(args["q"], args["k"], args["v"], key_padding_mask=holes)
    with pytest.raises(ValueError, match="either"):
        shared_value_attention(args["q"], args["k"], args["v"], key_lengths=args["key_lengths"],
                               key_padding_mask=torch.zeros(2, 7, dtype=torch.bool))
    # Regression: a mask shorter than the keys was accepted, its length taken as the real keys of every sentence.
    with pytest.raises(ValueError, match=r"key_padding_mask must have shape \(batch, key_len\) = \(2, 7\)"):
        shared_value_attention(args["q"], args["k"], args["v"], key_padding_mask=torch.zeros(2, 6, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"key_padding_mask must have shape"):
        shared_value_attention(args["q"], args["k"], args["v"], key_padding_mask=torch.zeros(1, 7, dtype=torch.bool))


def test_strided_key_lengths_are_read_by_value():
    args = _good()
    strided = torch.tensor([7, 0, 2, 0])[::2]
    got = shared_value_attention(args["q"], args["k"], args["v"], key_lengths=strided, scale=0.5)
    want, _ = shared_value_attention_reference(args["q"], args["k"], args["v"], key_lengths=torch.tensor([7, 2]),
                                               scale=0.5)
    torch.testing.assert_close(got.out, want)


def test_backward_accepts_good_arguments_and_matches_autograd():
    args = _good_backward()
    grads = BACKWARD(*args.values())
    leaves = [args[n].clone().requires_grad_() for n in ("q", "k", "v")]
    out, _ = shared_value_attention_reference(*leaves, key_lengths=args["key_lengths"], scale=0.5)
    want = torch.autograd.grad(out, leaves, args["grad_out"])
    for got, expected in zip(grads, want):
        torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("changes, match", [
    (dict(grad_out=torch.zeros(2, 3, 4)), "grad_out must have shape"),
    (dict(grad_out=torch.zeros(2, 3, 4, 5)), "grad_out must have shape"),
    (dict(grad_out=torch.zeros(2, 3, 4, 6, dtype=torch.float64)), "grad_out must have dtype"),
    (dict(grad_out=torch.zeros(2, 3, 4, 6, **META)), "grad_out is on meta"),
    (dict(out=torch.zeros(2, 3, 1, 6)), "out must have shape"),
    (dict(out=torch.zeros(2, 3, 4, 6, **META)), "out is on meta"),
    (dict(lse=torch.zeros(2, 3)), "lse must have shape"),
    (dict(lse=torch.zeros(2, 3, 4, dtype=torch.float64)), "lse must have dtype"),
    (dict(lse=torch.zeros(2, 3, 4, **META)), "lse is on meta"),
    (dict(q=torch.zeros(2, 3, 4)), "q must have shape"),
    (dict(k=torch.zeros(2, 2, 7, 5)), "k must have shape"),
    (dict(v=torch.zeros(2, 7)), "v must have shape"),
    (dict(v=torch.zeros(2, 7, 6, **META)), "v is on meta"),
    (dict(key_lengths=torch.tensor([8, 2])), "key_lengths must lie in"),
    (dict(key_lengths=torch.tensor([-3, 2])), "key_lengths must lie in"),
    (dict(key_lengths=torch.tensor([7, 2], **META)), "key_lengths is on meta"),
    (dict(key_lengths=torch.tensor([7])), "key_lengths must have shape"),
    (dict(scale=0.0), "scale must be positive"),
])
def test_backward_rejects_bad_input(changes, match):
    args = {**_good_backward(), **changes}
    with pytest.raises((ValueError, TypeError, RuntimeError), match=match):
        BACKWARD(*args.values())


def test_backward_on_empty_tensors():
    for shape in [(0, 3, 4, 7, 5, 6), (2, 0, 4, 7, 5, 6), (2, 3, 0, 7, 5, 6), (2, 3, 4, 0, 5, 6), (2, 3, 4, 7, 0, 6),
                  (2, 3, 4, 7, 5, 0)]:
        B, H, T, S, D, Dv = shape
        q, k, v = torch.randn(B, H, T, D), torch.randn(B, H, S, D), torch.randn(B, S, Dv)
        out, lse, _ = FORWARD(q, k, v, None, 1.0, False)
        grads = BACKWARD(torch.randn_like(out), q, k, v, out, lse, None, 1.0)
        assert [g.shape for g in grads] == [q.shape, k.shape, v.shape], shape
        assert all(torch.isfinite(g).all() for g in grads), shape
        if S == 0 or D == 0:  # no key, or logits all 0: no gradient reaches q and k
            assert not grads[0].any() and not grads[1].any(), shape
