"""Property-based tests of ``mma_nmt::attention`` (forward and backward) against the reference of SPEC section 1.

Hypothesis draws the case: shapes (1, primes, tile and block boundaries, and zero sizes), a head kind per head in any
mix of G L F B C, windows (up to wider than any distance, and huge), query offsets (negative, past the keys, huge),
padding (none, or lengths including 0 and 1), dropout with any 64-bit seed, q/k magnitudes up to 1e4 (logits up to
~1e9), non-contiguous inputs, float32 and float64. The values themselves come from a seeded torch generator.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mma_nmt.ops import fused_attention
from mma_nmt.reference import attention_reference
from mma_nmt.reference.attention import visibility_mask
from property_harness import (OperatorUnderTest, assert_strategy_reaches, attention_error_scales, check_against_reference,
                              size_and_length_labels)

MAX_EXAMPLES = 300

# 1, primes, and sizes on both sides of the kernels' query block (16) and key tile (128).
LENGTHS = [1, 2, 3, 5, 7, 13, 16, 17, 31, 127, 129]
HEAD_DIMS = [1, 2, 3, 5, 8, 13, 16, 33]


@dataclass(frozen=True)
class AttentionCase:
    dtype: torch.dtype
    batch: int
    head_kinds: tuple[int, ...]
    query_len: int
    key_len: int
    head_dim: int
    value_dim: int
    window: int
    query_offset: int
    key_lengths: tuple[int, ...] | None
    scale: float | None
    dropout_p: float
    dropout_seed: int
    magnitude: float  # q and k are multiplied by it: logits grow with its square
    non_contiguous: bool
    values_seed: int


@st.composite
def attention_cases(draw) -> AttentionCase:
    small = st.sampled_from([1, 2, 3, 5])
    sizes = st.sampled_from(LENGTHS)
    dims = ["batch", "heads", "query_len", "key_len", "head_dim", "value_dim"]
    zero_sized = draw(st.sampled_from([None] * 12 + dims))  # mostly none, else one size is 0
    batch = 0 if zero_sized == "batch" else draw(small)
    heads = 0 if zero_sized == "heads" else draw(small)
    query_len = 0 if zero_sized == "query_len" else draw(sizes)
    key_len = 0 if zero_sized == "key_len" else draw(st.one_of(st.just(query_len), sizes))
    head_dim = 0 if zero_sized == "head_dim" else draw(st.sampled_from(HEAD_DIMS))
    value_dim = 0 if zero_sized == "value_dim" else draw(st.one_of(st.just(head_dim), st.sampled_from(HEAD_DIMS)))
    if query_len * key_len > 4000:  # keeps the reference's (B, H, T, S) tensors small
        batch, heads = min(batch, 2), min(heads, 2)
    window = draw(st.one_of(st.integers(0, key_len + 2), st.sampled_from([2**62, 2**63 - 1])))
    query_offset = draw(st.one_of(st.just(0), st.just(key_len - query_len), st.integers(-key_len - 3, key_len + 3),
                                  st.sampled_from([2**60, -(2**60)])))  # the extremes allowed
    padding = draw(st.sampled_from(["none", "random", "with empty and single"]))
    key_lengths = None
    if padding != "none":
        key_lengths = draw(st.lists(st.integers(0, key_len), min_size=batch, max_size=batch))
        if padding == "with empty and single" and batch >= 2:
            key_lengths[0], key_lengths[-1] = 0, min(1, key_len)
        key_lengths = tuple(key_lengths)
    dropout_p = draw(st.one_of(st.just(0.0), st.floats(0.05, 0.9)))
    return AttentionCase(
        dtype=draw(st.sampled_from([torch.float32, torch.float64])),
        batch=batch,
        head_kinds=tuple(draw(st.lists(st.integers(0, 4), min_size=heads, max_size=heads))),
        query_len=query_len,
        key_len=key_len,
        head_dim=head_dim,
        value_dim=value_dim,
        window=window,
        query_offset=query_offset,
        key_lengths=key_lengths,
        scale=draw(st.one_of(st.none(), st.floats(1e-3, 4.0))),
        dropout_p=dropout_p,
        dropout_seed=draw(st.integers(-(2**63), 2**63 - 1)),
        magnitude=draw(st.sampled_from([1.0, 1.0, 1.0, 10.0, 1e2, 1e3, 1e4])),
        non_contiguous=draw(st.booleans()),
        values_seed=draw(st.integers(0, 2**31 - 1)),
    )


def make_inputs(case: AttentionCase):
    generator = torch.Generator().manual_seed(case.values_seed)

    def one(length, dim, magnitude):
        if case.non_contiguous:  # a (B, L, H, D) buffer seen as (B, H, L, D)
            t = torch.randn(case.batch, length, len(case.head_kinds), dim, generator=generator, dtype=case.dtype)
            t = t.transpose(1, 2)
        else:
            t = torch.randn(case.batch, len(case.head_kinds), length, dim, generator=generator, dtype=case.dtype)
        return (t * magnitude).requires_grad_()

    return dict(q=one(case.query_len, case.head_dim, case.magnitude),
                k=one(case.key_len, case.head_dim, case.magnitude),
                v=one(case.key_len, case.value_dim, 1.0))


def options(case: AttentionCase):
    lengths = None if case.key_lengths is None else torch.tensor(case.key_lengths, dtype=torch.int64)
    return dict(head_kinds=list(case.head_kinds), key_lengths=lengths, window=case.window, scale=case.scale,
                query_offset=case.query_offset, dropout_p=case.dropout_p, seed=case.dropout_seed)


def fused(case: AttentionCase, inputs):
    result = fused_attention(inputs["q"], inputs["k"], inputs["v"], return_probs=True, **options(case))
    return dict(out=result.out, lse=result.lse, probs=result.probs)


def reference(case: AttentionCase, inputs):
    out, probs = attention_reference(inputs["q"], inputs["k"], inputs["v"], **options(case))
    return dict(out=out, probs=probs)


def rows_without_keys(case: AttentionCase, inputs):
    visible = visibility_mask(list(case.head_kinds), case.query_len, case.key_len, window=case.window,
                              query_offset=case.query_offset, key_lengths=options(case)["key_lengths"],
                              batch=case.batch)
    return ~visible.any(dim=-1)  # (B, H, T)


def lse_is_neg_inf_exactly_where_no_key_is_visible(case: AttentionCase, inputs, outputs):
    empty = rows_without_keys(case, inputs)
    lse = outputs["lse"]
    assert torch.equal(torch.isneginf(lse), empty), "lse must be -inf exactly for the queries that see no key"
    assert not torch.isnan(lse).any()
    # Rows that see no key have zero output and zero weights.
    assert not outputs["out"][empty].any() and not outputs["probs"][empty].any()


def error_scales(case: AttentionCase, inputs, grad_outputs):
    """Each output and gradient computed from the absolute values of its terms (probabilities from the reference)."""
    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    scale = case.scale if case.scale is not None else (1.0 / math.sqrt(case.head_dim) if case.head_dim else 1.0)
    out, probs = attention_reference(q, k, v, **{**options(case), "scale": scale})
    weights = probs / (1 - case.dropout_p)  # an upper bound of the kept weights
    return attention_error_scales(q, k, v, weights, grad_outputs["out"], scale, case.dtype, out=out)


ATTENTION = OperatorUnderTest(
    name="mma_nmt::attention",
    make_inputs=make_inputs,
    fused=fused,
    reference=reference,
    differentiable=["out"],
    allowed_non_finite=lambda case, inputs, outputs: dict(lse=rows_without_keys(case, inputs)),
    extra_checks=lse_is_neg_inf_exactly_where_no_key_is_visible,
    error_scales=error_scales,
)


@settings(max_examples=MAX_EXAMPLES)
@given(case=attention_cases(), seed=st.integers(0, 2**31 - 1))
def test_attention_matches_reference_on_random_cases(case, seed):
    check_against_reference(ATTENTION, case, seed)


def test_case_strategy_reaches_the_edges():
    """The strategy can produce every head kind, zero sizes, huge windows and offsets, and extreme magnitudes."""

    def label(case):
        labels = size_and_length_labels(case, ("batch", "query_len", "key_len", "head_dim", "value_dim"))
        labels |= {f"kind{k}" for k in case.head_kinds}
        flags = {"huge window": case.window >= 2**62, "huge offset": abs(case.query_offset) >= 2**60,
                 "extreme logits": case.magnitude >= 1e3, "dropout": case.dropout_p > 0}
        return labels | {name for name, on in flags.items() if on}

    wanted = {f"kind{k}" for k in range(5)} | {"batch", "query_len", "key_len", "head_dim", "value_dim", "huge window",
                                               "huge offset", "extreme logits", "dropout", "empty sentence",
                                               "torch.float32"}
    assert_strategy_reaches(attention_cases(), label, wanted, 5 * MAX_EXAMPLES)
