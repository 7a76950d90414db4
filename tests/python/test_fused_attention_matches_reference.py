"""The fused attention operator against the plain-PyTorch reference of SPEC section 1: outputs and all gradients."""

from __future__ import annotations

import pytest
import torch

from attention_cases import assert_fused_matches_reference, make_qkv, padded_lengths
from conftest import cpu_kernel_builds
from mma_nmt.ops import fused_attention, parse_head_spec


def check_against_reference(q, k, v, *, head_kinds, key_lengths=None, window=1, query_offset=0, dropout_p=0.0, seed=0):
    kinds = parse_head_spec(head_kinds, q.shape[1])
    assert_fused_matches_reference(q, k, v, head_kinds=kinds, key_lengths=key_lengths, window=window,
                                   query_offset=query_offset, dropout_p=dropout_p, seed=seed)


@pytest.mark.parametrize("spec", ["G", "L", "F", "B", "C", "GLFB", "GLLL", "GFFF", "GBBB"])
@pytest.mark.parametrize("window", [0, 1, 2, 3, 4])
def test_every_head_kind_and_window_matches_reference(spec, window):
    q, k, v = make_qkv(3, 4, 23, 23, 16, dtype=torch.float64)
    check_against_reference(q, k, v, head_kinds=spec, key_lengths=padded_lengths(3, 23), window=window)


@pytest.mark.parametrize("length", [1, 7, 97, 300])
@pytest.mark.parametrize("head_dim", [8, 64, 72])
@pytest.mark.parametrize("heads", [1, 4, 8])
def test_shapes_match_reference_float32(length, head_dim, heads):
    if length == 300 and heads == 8 and head_dim > 8:
        batch = 1  # keeps the float64 reference of the largest cases quick
    else:
        batch = 2
    q, k, v = make_qkv(batch, heads, length, length, head_dim)
    spec = "GLFB" if heads >= 4 else "L"
    check_against_reference(q, k, v, head_kinds=spec, key_lengths=padded_lengths(batch, length), window=2)


@pytest.mark.parametrize("isa", cpu_kernel_builds())
def test_every_cpu_kernel_build_matches_reference(isa, monkeypatch):
    monkeypatch.setenv("MMA_NMT_CPU_ISA", isa)
    for dtype in (torch.float32, torch.float64):
        q, k, v = make_qkv(2, 4, 45, 45, 72, dtype=dtype)
        check_against_reference(q, k, v, head_kinds="GLFB", key_lengths=padded_lengths(2, 45), window=1)


def test_non_contiguous_inputs_match_reference():
    q, k, v = make_qkv(2, 4, 19, 19, 24, non_contiguous=True)
    check_against_reference(q, k, v, head_kinds="GLFB", key_lengths=padded_lengths(2, 19), window=1)


def test_cross_attention_lengths_and_value_dim_differ():
    q, k, v = make_qkv(3, 2, 13, 29, 16, value_dim=40, dtype=torch.float64)
    check_against_reference(q, k, v, head_kinds="GG", key_lengths=padded_lengths(3, 29))


def test_incremental_query_offset_matches_reference():
    q, k, v = make_qkv(2, 4, 1, 17, 8, dtype=torch.float64)
    check_against_reference(q, k, v, head_kinds="CCLG", query_offset=16, window=2)


def test_long_key_sequences_cross_several_tiles():
    q, k, v = make_qkv(1, 2, 40, 530, 8, dtype=torch.float64)
    check_against_reference(q, k, v, head_kinds="GF", key_lengths=torch.tensor([517]), query_offset=250)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_dropout_matches_reference_with_same_seed(dtype):
    q, k, v = make_qkv(2, 4, 31, 31, 16, dtype=dtype)
    check_against_reference(q, k, v, head_kinds="GLFB", key_lengths=padded_lengths(2, 31), dropout_p=0.3, seed=1234)


def test_dropout_keeps_the_expected_fraction_and_differs_by_seed():
    q, k, v = make_qkv(4, 4, 64, 64, 8, requires_grad=False)
    v = torch.ones_like(v)  # with unit values, each output entry is the kept, rescaled probability mass of its row
    first = fused_attention(q, k, v, head_kinds="G", dropout_p=0.25, seed=7).out[..., 0]
    second = fused_attention(q, k, v, head_kinds="G", dropout_p=0.25, seed=8).out[..., 0]
    assert abs(first.mean().item() - 1.0) < 0.02  # inverted dropout preserves the expected mass
    assert not torch.equal(first, second)
    again = fused_attention(q, k, v, head_kinds="G", dropout_p=0.25, seed=7).out[..., 0]
    assert torch.equal(first, again)
