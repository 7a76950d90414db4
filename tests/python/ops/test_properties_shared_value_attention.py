"""Property-based tests of ``mma_nmt::shared_value_attention`` (forward and backward) against the reference of SPEC
section 2 (bad calls: test_shared_value_attention_errors.py).

Hypothesis draws the case: batch and heads in {1, 2, 3, 5} (or 0), query and key lengths in {1, primes, 16, 17, 31,
127, 129} (or 0), head and value dims likewise (or 0), no padding, random lengths, or lengths with a 0 and a 1, scale
1 (Luong's "general" score) or 1e-3..4, q and k multiplied by up to 1e4 (logits up to ~1e9), contiguous or transposed
views, float32 and float64.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mma_nmt.ops import shared_value_attention
from mma_nmt.reference import shared_value_attention_reference
from property_harness import (
    OperatorUnderTest,
    assert_strategy_reaches,
    attention_error_scales,
    check_against_reference,
    rows_without_keys,
    sentences_without_keys,
    size_and_length_labels,
)

MAX_EXAMPLES = 200
LENGTHS = [1, 2, 3, 5, 7, 13, 16, 17, 31, 127, 129]
DIMS = [1, 2, 3, 5, 8, 13, 16, 33]


@dataclass(frozen=True)
class SharedValueCase:
    dtype: torch.dtype
    batch: int
    heads: int
    query_len: int
    key_len: int
    head_dim: int
    value_dim: int
    key_lengths: tuple[int, ...] | None
    scale: float
    magnitude: float
    non_contiguous: bool
    values_seed: int


@st.composite
def shared_value_cases(draw) -> SharedValueCase:
    small = st.sampled_from([1, 2, 3, 5])
    zero = draw(st.sampled_from([None] * 6 + ["batch", "heads", "query_len", "key_len", "head_dim", "value_dim"]))
    batch = 0 if zero == "batch" else draw(small)
    heads = 0 if zero == "heads" else draw(small)
    query_len = 0 if zero == "query_len" else draw(st.one_of(st.just(1), st.sampled_from(LENGTHS)))
    key_len = 0 if zero == "key_len" else draw(st.sampled_from(LENGTHS))
    if query_len * key_len > 4000:
        batch, heads = min(batch, 2), min(heads, 2)
    padding = draw(st.sampled_from(["none", "random", "with empty and single"]))
    key_lengths = None
    if padding != "none":
        key_lengths = draw(st.lists(st.integers(0, key_len), min_size=batch, max_size=batch))
        if padding == "with empty and single" and batch >= 2:
            key_lengths[0], key_lengths[-1] = 0, min(1, key_len)
        key_lengths = tuple(key_lengths)
    return SharedValueCase(
        dtype=draw(st.sampled_from([torch.float32, torch.float64])),
        batch=batch, heads=heads, query_len=query_len, key_len=key_len,
        head_dim=0 if zero == "head_dim" else draw(st.sampled_from(DIMS)),
        value_dim=0 if zero == "value_dim" else draw(st.sampled_from(DIMS)),
        key_lengths=key_lengths,
        scale=draw(st.one_of(st.just(1.0), st.floats(1e-3, 4.0))),
        magnitude=draw(st.sampled_from([1.0, 1.0, 1.0, 10.0, 1e2, 1e3, 1e4])),
        non_contiguous=draw(st.booleans()),
        values_seed=draw(st.integers(0, 2**31 - 1)),
    )


def make_inputs(case: SharedValueCase):
    gen = torch.Generator().manual_seed(case.values_seed)
    B, H = case.batch, case.heads

    def per_head(length, dim):
        if case.non_contiguous:
            t = torch.randn(B, length, H, dim, generator=gen, dtype=case.dtype).transpose(1, 2)
        else:
            t = torch.randn(B, H, length, dim, generator=gen, dtype=case.dtype)
        return (t * case.magnitude).requires_grad_()

    v = torch.randn(case.key_len, B, case.value_dim, generator=gen, dtype=case.dtype)
    v = v.transpose(0, 1) if case.non_contiguous else v.transpose(0, 1).contiguous()
    return dict(q=per_head(case.query_len, case.head_dim), k=per_head(case.key_len, case.head_dim),
                v=v.requires_grad_())


def lengths_of(case):
    return None if case.key_lengths is None else torch.tensor(case.key_lengths, dtype=torch.int64)


def fused(case, inputs):
    result = shared_value_attention(inputs["q"], inputs["k"], inputs["v"], key_lengths=lengths_of(case),
                                    scale=case.scale, return_probs=True)
    return dict(out=result.out, lse=result.lse, probs=result.probs)


def reference(case, inputs):
    out, probs = shared_value_attention_reference(inputs["q"], inputs["k"], inputs["v"], key_lengths=lengths_of(case),
                                                  scale=case.scale)
    return dict(out=out, probs=probs)


def lse_is_neg_inf_exactly_for_sentences_without_keys(case, inputs, outputs):
    empty = rows_without_keys(case, case.heads)
    lse = outputs["lse"]
    assert torch.equal(torch.isneginf(lse), empty), "lse must be -inf exactly for the sentences without keys"
    assert not outputs["out"][empty].any() and not outputs["probs"][empty].any()
    empty_sentences = sentences_without_keys(case)
    for name in ("grad_q", "grad_k", "grad_v"):  # and nothing to differentiate
        assert not outputs[name][empty_sentences].any(), name


def error_scales(case, inputs, grad_outputs):
    """Each output and gradient computed from the absolute values of its terms; one value for every head."""
    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    _, probs = shared_value_attention_reference(q, k, v, key_lengths=lengths_of(case), scale=case.scale)
    return attention_error_scales(q, k, v.unsqueeze(1), probs, grad_outputs["out"], case.scale, case.dtype)


SHARED_VALUE = OperatorUnderTest(
    name="mma_nmt::shared_value_attention",
    make_inputs=make_inputs,
    fused=fused,
    reference=reference,
    differentiable=["out"],
    allowed_non_finite=lambda case, inputs, outputs: dict(lse=rows_without_keys(case, case.heads)),
    extra_checks=lse_is_neg_inf_exactly_for_sentences_without_keys,
    error_scales=error_scales,
)


@settings(max_examples=MAX_EXAMPLES)
@given(case=shared_value_cases(), seed=st.integers(0, 2**31 - 1))
def test_shared_value_attention_matches_reference_on_random_cases(case, seed):
    check_against_reference(SHARED_VALUE, case, seed)


def test_case_strategy_reaches_the_edges():
    def label(case):
        labels = size_and_length_labels(case, ("batch", "heads", "query_len", "key_len", "head_dim", "value_dim"))
        labels |= {"transposed" if case.non_contiguous else "contiguous"}
        return labels | ({"extreme logits"} if case.magnitude >= 1e3 else set())

    wanted = {"batch", "heads", "query_len", "key_len", "head_dim", "value_dim", "empty sentence", "one-key sentence",
              "extreme logits", "torch.float32", "torch.float64", "transposed", "contiguous"}
    assert_strategy_reaches(shared_value_cases(), label, wanted, 5 * MAX_EXAMPLES)


# ---- regressions found by the property test ----

def test_zero_value_dim_still_has_lse_and_weights():
    """Regression: with value dim 0 the CPU op skipped the kernel: lse -inf and weights 0."""
    q, k, v = torch.randn(2, 3, 4, 5), torch.randn(2, 3, 7, 5), torch.randn(2, 7, 0)
    got = shared_value_attention(q, k, v, key_lengths=torch.tensor([7, 2]), scale=0.5, return_probs=True)
    logits = (q @ k.transpose(-1, -2)) * 0.5
    want_lse = torch.stack([logits[0].logsumexp(-1), logits[1, :, :, :2].logsumexp(-1)])
    torch.testing.assert_close(got.lse, want_lse)
    torch.testing.assert_close(got.probs.sum(-1), torch.ones(2, 3, 4))


def test_zero_head_dim_gives_uniform_weights_and_their_value_gradient():
    """Regression: with head dim 0 (all logits 0) the backward skipped the kernel and returned grad_v = 0."""
    q, k = torch.randn(1, 2, 3, 0), torch.randn(1, 2, 4, 0)
    v = torch.randn(1, 4, 5, requires_grad=True)
    out = shared_value_attention(q, k, v, key_lengths=torch.tensor([4])).out
    out.sum().backward()
    torch.testing.assert_close(out, v.detach().mean(1).expand(1, 2, 3, 5))
    torch.testing.assert_close(v.grad, torch.full((1, 4, 5), 2 * 3 / 4))


@pytest.mark.parametrize("isa", ["default", "avx2", "avx512"])
def test_one_key_has_weight_exactly_one_with_large_logits(isa, monkeypatch):
    """Regression: the FMA builds contracted the backward's recomputed logit and exp(logit - lse) into one fused
    multiply-add, so with one key (logit ~3e4, float32) the weight was 1 - 5e-4 in the backward and grad_v wrong."""
    monkeypatch.setenv("MMA_NMT_CPU_ISA", isa)
    q = torch.full((1, 1, 1, 1), 100.0, requires_grad=True)
    k = torch.full((1, 1, 1, 1), 101.3, requires_grad=True)
    v = torch.randn(1, 1, 3, requires_grad=True)
    result = shared_value_attention(q, k, v, scale=3.0, return_probs=True)
    result.out.backward(torch.ones_like(result.out))
    assert result.probs.item() == 1.0
    assert torch.equal(v.grad, torch.ones_like(v)) and q.grad.item() == 0.0 and k.grad.item() == 0.0
