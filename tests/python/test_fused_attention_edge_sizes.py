"""Regression tests of valid but extreme calls: zero-sized tensors, head or value dim 0, windows and query offsets far
beyond the sequence. Each once gave a wrong answer (see docs/reliability.md)."""

from __future__ import annotations

import pytest
import torch

from mma_nmt.ops import fused_attention
from mma_nmt.reference import attention_reference

OP = torch.ops.mma_nmt.attention


def qkv(batch, heads, query_len, key_len, head_dim, value_dim):
    return tuple(torch.randn(batch, heads, n, d, dtype=torch.float64, requires_grad=True)
                 for n, d in ((query_len, head_dim), (key_len, head_dim), (key_len, value_dim)))


def assert_matches_reference(q, k, v, **options):
    result = fused_attention(q, k, v, return_probs=True, **options)
    want, want_probs = attention_reference(q, k, v, **options)
    torch.testing.assert_close(result.out, want, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(result.probs, want_probs, rtol=1e-12, atol=1e-12)
    grad_out = torch.randn_like(want)
    got = torch.autograd.grad(result.out, (q, k, v), grad_out, allow_unused=True)
    ref = torch.autograd.grad(want, (q, k, v), grad_out, allow_unused=True)
    for name, g, r in zip("qkv", got, ref):
        r = torch.zeros_like(g) if r is None else r
        torch.testing.assert_close(g, r, rtol=1e-12, atol=1e-12, msg=lambda m: f"grad_{name}: {m}")
    return result


@pytest.mark.parametrize("sizes", [(0, 2, 3, 4, 5, 5), (2, 0, 3, 4, 5, 5), (2, 2, 0, 4, 5, 5), (2, 2, 3, 0, 5, 5),
                                   (2, 2, 3, 4, 0, 5), (2, 2, 3, 4, 5, 0), (1, 1, 1, 1, 1, 1),
                                   (1, 1, 3, 300, 0, 2), (1, 1, 3, 300, 2, 0), (1, 1, 20, 300, 0, 0)])  # several tiles
def test_zero_and_unit_sizes_match_reference(sizes):
    q, k, v = qkv(*sizes)
    assert_matches_reference(q, k, v, head_kinds=[0] * sizes[1])


def test_zero_head_dim_weighs_every_visible_key_equally():
    # With head_dim 0 every logit is 0: the output is the mean of the visible values, not 0.
    q, k, v = qkv(1, 2, 4, 5, 0, 3)
    result = assert_matches_reference(q, k, v, head_kinds=[0, 3], key_lengths=torch.tensor([4]))
    torch.testing.assert_close(result.out[0, 0], v[0, 0, :4].mean(0).expand(4, 3))
    torch.testing.assert_close(result.lse[0, 1], torch.log(torch.tensor([1.0, 2, 3, 4], dtype=torch.float64)))


def test_zero_value_dim_still_gives_weights_and_lse():
    q, k, v = qkv(2, 1, 3, 4, 2, 0)
    result = assert_matches_reference(q, k, v, head_kinds=[0])
    torch.testing.assert_close(result.probs.sum(-1), torch.ones(2, 1, 3, dtype=torch.float64))
    assert torch.isfinite(result.lse).all()


@pytest.mark.parametrize("window", [2**62, 2**63 - 1])
def test_huge_window_sees_every_key(window):
    q, k, v = qkv(2, 1, 5, 7, 4, 3)
    huge = assert_matches_reference(q, k, v, head_kinds=[1], window=window)
    everything = fused_attention(q, k, v, head_kinds="G")
    torch.testing.assert_close(huge.out, everything.out, rtol=0, atol=0)


@pytest.mark.parametrize("offset", [2**60, -(2**60), 2**60 - 3])
@pytest.mark.parametrize("kinds", [[0, 1, 2, 3, 4]])
def test_extreme_query_offsets_match_reference(offset, kinds):
    q, k, v = qkv(1, 5, 4, 6, 3, 2)
    assert_matches_reference(q, k, v, head_kinds=kinds, query_offset=offset, window=2**63 - 1)
    assert_matches_reference(q, k, v, head_kinds=kinds, query_offset=offset, window=abs(offset) + 2)
