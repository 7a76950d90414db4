"""Properties of the fused attention operator: gradcheck, opcheck, masking semantics and fully masked rows."""

from __future__ import annotations

import pytest
import torch
from torch.library import opcheck

from attention_cases import make_qkv
from mma_nmt.ops import HeadKind, fused_attention, parse_head_spec


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("spec,dropout", [("GLFB", 0.0), ("CLFB", 0.2), ("LLLL", 0.0)])
def test_gradcheck_float64(seed, spec, dropout):
    torch.manual_seed(seed)
    q, k, v = make_qkv(2, 4, 6, 6, 5, value_dim=3, dtype=torch.float64)
    lengths = torch.tensor([6, 1])

    def run(q, k, v):
        return fused_attention(q, k, v, head_kinds=spec, key_lengths=lengths, window=1, dropout_p=dropout,
                               seed=99).out

    assert torch.autograd.gradcheck(run, (q, k, v))


def test_gradcheck_single_query_and_key():
    q, k, v = make_qkv(1, 2, 1, 1, 3, dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda q, k, v: fused_attention(q, k, v, head_kinds="GC").out, (q, k, v))


@pytest.mark.parametrize("return_probs", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_opcheck(return_probs, dtype):
    q, k, v = make_qkv(2, 4, 7, 9, 8, value_dim=6, dtype=dtype)
    args = (q, k, v, torch.tensor([9, 3]), [0, 1, 2, 3], 1, 0.35, 0, 0.0, 0, return_probs)
    opcheck(torch.ops.mma_nmt.attention.default, args)


def test_opcheck_without_padding_and_with_dropout():
    q, k, v = make_qkv(1, 2, 5, 5, 4, dtype=torch.float64)
    opcheck(torch.ops.mma_nmt.attention.default, (q, k, v, None, [4, 1], 2, 0.5, 0, 0.1, 3, False))


def test_fully_masked_rows_give_zero_output_and_zero_gradients():
    # Sentence 1 has no real key at all; in sentence 0 the local head (window 0) has no key for queries past length 3.
    q, k, v = make_qkv(2, 2, 6, 6, 4, dtype=torch.float64)
    lengths = torch.tensor([3, 0])
    result = fused_attention(q, k, v, head_kinds=[HeadKind.LOCAL, HeadKind.GLOBAL], key_lengths=lengths, window=0)
    assert torch.isfinite(result.out).all()
    assert torch.equal(result.out[1], torch.zeros_like(result.out[1]))
    assert torch.equal(result.out[0, 0, 3:], torch.zeros_like(result.out[0, 0, 3:]))
    assert torch.isneginf(result.lse[1]).all() and torch.isneginf(result.lse[0, 0, 3:]).all()
    grads = torch.autograd.grad(result.out.sum(), (q, k, v))
    for g in grads:
        assert torch.isfinite(g).all()
    assert torch.equal(grads[0][1], torch.zeros_like(grads[0][1]))
    assert torch.equal(grads[0][0, 0, 3:], torch.zeros_like(grads[0][0, 0, 3:]))


def test_local_head_ignores_far_keys():
    q, k, v = make_qkv(1, 1, 12, 12, 8, requires_grad=False)
    before = fused_attention(q, k, v, head_kinds="L", window=1).out
    k2, v2 = k.clone(), v.clone()
    k2[:, :, 8:] += 100.0  # keys 8.. are farther than 1 from queries 0..6
    v2[:, :, 8:] -= 100.0
    after = fused_attention(q, k2, v2, head_kinds="L", window=1).out
    torch.testing.assert_close(after[:, :, :7], before[:, :, :7], rtol=0, atol=0)
    assert not torch.allclose(after[:, :, 7:], before[:, :, 7:])


@pytest.mark.parametrize("spec,visible", [("F", lambda i, j: j >= i), ("B", lambda i, j: j <= i),
                                          ("C", lambda i, j: j <= i), ("G", lambda i, j: True)])
def test_directional_heads_see_exactly_their_keys(spec, visible):
    q, k, v = make_qkv(1, 1, 9, 9, 4, requires_grad=False)
    probs = fused_attention(q, k, v, head_kinds=spec, return_probs=True).probs[0, 0]
    for i in range(9):
        for j in range(9):
            assert (probs[i, j] > 0).item() == visible(i, j), (spec, i, j)
    torch.testing.assert_close(probs.sum(-1), torch.ones(9))


def test_padding_mask_and_lengths_agree():
    q, k, v = make_qkv(3, 2, 7, 7, 8, requires_grad=False)
    lengths = torch.tensor([7, 4, 1])
    mask = torch.arange(7).unsqueeze(0) >= lengths.unsqueeze(1)
    by_lengths = fused_attention(q, k, v, head_kinds="GL", key_lengths=lengths).out
    by_mask = fused_attention(q, k, v, head_kinds="GL", key_padding_mask=mask).out
    assert torch.equal(by_lengths, by_mask)


def test_head_spec_is_stretched_the_papers_way():
    assert parse_head_spec("GLFB", 8) == [0, 0, 1, 1, 2, 2, 3, 3]
    assert parse_head_spec("G", 3) == [0, 0, 0]
    assert parse_head_spec([3, 2], 2) == [3, 2]


def test_empty_batch_returns_empty_outputs():
    q, k, v = make_qkv(0, 2, 5, 5, 4, requires_grad=False)
    result = fused_attention(q, k, v, head_kinds="GG")
    assert result.out.shape == (0, 2, 5, 4)
