"""Bad calls to the fused attention operator raise errors that name the argument and what was expected."""

from __future__ import annotations

import pytest
import torch

from attention_cases import make_qkv
from mma_nmt.ops import fused_attention, parse_head_spec

OP = torch.ops.mma_nmt.attention


def good_args():
    q, k, v = make_qkv(2, 4, 5, 6, 8, requires_grad=False)
    return dict(q=q, k=k, v=v, key_lengths=torch.tensor([6, 2]), head_kinds=[0, 1, 2, 3], window=1, scale=0.3)


def call(**changes):
    args = good_args()
    args.update(changes)
    return OP(args["q"], args["k"], args["v"], args["key_lengths"], args["head_kinds"], args["window"], args["scale"])


@pytest.mark.parametrize("changes,pattern", [
    (dict(q=torch.randn(2, 4, 5)), r"q must have shape \(batch, heads, query_len, head_dim\), got a 3-d"),
    (dict(k=torch.randn(3, 4, 6, 8)), r"k must have shape \[2, 4, 6, 8\]"),
    (dict(v=torch.randn(2, 3, 6, 8)), r"v must have shape \[2, 4, 6, 8\]"),
    (dict(k=torch.randn(2, 4, 6, 7)), r"k must have shape \[2, 4, 6, 8\]"),
    (dict(head_kinds=[0, 1]), r"head_kinds must give one kind per head \(4\), got 2"),
    (dict(head_kinds=[0, 1, 2, 9]), r"head_kinds entries must be in \[0, 5\)"),
    (dict(window=-1), r"window must be >= 0, got -1"),
    (dict(scale=0.0), r"scale must be positive"),
    (dict(key_lengths=torch.tensor([6, 7])), r"key_lengths must lie in \[0, key_len=6\]"),
    (dict(key_lengths=torch.tensor([6, -1])), r"key_lengths must lie in \[0, key_len=6\]"),
    (dict(key_lengths=torch.tensor([6])), r"key_lengths must have shape \(batch,\) = \(2,\)"),
])
def test_bad_shapes_and_values_raise_value_errors(changes, pattern):
    with pytest.raises(ValueError, match=pattern):
        call(**changes)


@pytest.mark.parametrize("changes,pattern", [
    (dict(k=torch.randn(2, 4, 6, 8, dtype=torch.float64)), r"k must have dtype Float like q, got Double"),
    (dict(q=torch.randint(0, 3, (2, 4, 5, 8))), r"q must be a floating-point tensor"),
    (dict(q=torch.randn(2, 4, 5, 8).half(), k=torch.randn(2, 4, 6, 8).half(), v=torch.randn(2, 4, 6, 8).half()),
     r"on the CPU q must be float32 or float64"),
    (dict(key_lengths=torch.tensor([6, 2], dtype=torch.int32)), r"key_lengths must be int64"),
])
def test_bad_dtypes_raise_type_errors(changes, pattern):
    with pytest.raises(TypeError, match=pattern):
        call(**changes)


def test_mixed_devices_raise():
    args = good_args()
    with pytest.raises((ValueError, RuntimeError), match=r"k is on meta but q is on cpu"):
        OP(args["q"], args["k"].to("meta"), args["v"], args["key_lengths"], args["head_kinds"], 1, 0.3)


def test_dropout_probability_out_of_range():
    args = good_args()
    with pytest.raises(ValueError, match=r"dropout_p must be in \[0, 1\), got 1"):
        OP(args["q"], args["k"], args["v"], None, args["head_kinds"], 1, 0.3, 0, 1.0, 0, False)


@pytest.mark.parametrize("spec,pattern", [("GXLB", "letters G, L, F, B, C"), ("GLF", "neither equals nor divides"),
                                          ("", "non-empty")])
def test_bad_head_spec_names_the_problem(spec, pattern):
    with pytest.raises(ValueError, match=pattern):
        parse_head_spec(spec, 4)


def test_padding_mask_with_holes_is_rejected():
    q, k, v = make_qkv(1, 1, 3, 3, 4, requires_grad=False)
    with pytest.raises(ValueError, match="right padding"):
        fused_attention(q, k, v, key_padding_mask=torch.tensor([[False, True, False]]))


def test_lengths_and_mask_together_are_rejected():
    q, k, v = make_qkv(1, 1, 3, 3, 4, requires_grad=False)
    with pytest.raises(ValueError, match="either as key_lengths or as key_padding_mask"):
        fused_attention(q, k, v, key_lengths=torch.tensor([3]), key_padding_mask=torch.zeros(1, 3, dtype=torch.bool))
