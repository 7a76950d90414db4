"""Property-based tests of ``mma_nmt::multilayer_attention`` (forward and backward) against its contract in plain
PyTorch (reference/multilayer_attention.py, SPEC section 3).

Hypothesis draws the case: 1-5 layers; joint weights with one value set per layer or one summed set, or layer-specific
weights; batch in {1, 2, 3} (or 0), heads in {1, 2, 3}, query lengths in {1, primes, 16, 17} (or 0), key lengths in
{1, primes, 16, 17, 31, 129} (or 0), head and value sizes in {1, 2, 3, 5, 8, 13} (or 0), no padding, random lengths, or
lengths with a 0 and a 1, the scale, q and k multiplied by up to 1e3, float32 and float64.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mma_nmt.ops import multilayer_attention
from mma_nmt.reference import multilayer_attention_op_reference
from property_harness import (OperatorUnderTest, assert_strategy_reaches, attention_error_scales, check_against_reference,
                              rows_without_keys, size_and_length_labels)

MAX_EXAMPLES = 150
QUERY_LENGTHS = [1, 2, 3, 5, 7, 13, 16, 17]
KEY_LENGTHS = [1, 2, 3, 5, 7, 13, 16, 17, 31, 129]
DIMS = [1, 2, 3, 5, 8, 13]


@dataclass(frozen=True)
class MultilayerCase:
    dtype: torch.dtype
    layers: int
    layer_specific: bool
    summed_values: bool
    batch: int
    heads: int
    query_len: int
    key_len: int
    head_dim: int
    value_dim: int
    key_lengths: tuple[int, ...] | None
    scale: float | None
    magnitude: float
    values_seed: int

    @property
    def fused_heads(self) -> int:
        return self.layers * self.heads if self.layer_specific else self.heads


@st.composite
def multilayer_cases(draw) -> MultilayerCase:
    zero = draw(st.sampled_from([None] * 6 + ["batch", "query_len", "key_len", "head_dim", "value_dim"]))
    batch = 0 if zero == "batch" else draw(st.sampled_from([1, 2, 3]))
    key_len = 0 if zero == "key_len" else draw(st.sampled_from(KEY_LENGTHS))
    padding = draw(st.sampled_from(["none", "random", "with empty and single"]))
    key_lengths = None
    if padding != "none":
        key_lengths = draw(st.lists(st.integers(0, key_len), min_size=batch, max_size=batch))
        if padding == "with empty and single" and batch >= 2:
            key_lengths[0], key_lengths[-1] = 0, min(1, key_len)
        key_lengths = tuple(key_lengths)
    weights = draw(st.sampled_from(["joint", "joint, summed values", "layer-specific"]))
    return MultilayerCase(
        dtype=draw(st.sampled_from([torch.float32, torch.float64])),
        layers=draw(st.integers(1, 5)),
        layer_specific=weights == "layer-specific",
        summed_values=weights == "joint, summed values",
        batch=batch, heads=draw(st.sampled_from([1, 2, 3])),
        query_len=0 if zero == "query_len" else draw(st.sampled_from(QUERY_LENGTHS)),
        key_len=key_len,
        head_dim=0 if zero == "head_dim" else draw(st.sampled_from(DIMS)),
        value_dim=0 if zero == "value_dim" else draw(st.sampled_from(DIMS)),
        key_lengths=key_lengths,
        scale=draw(st.one_of(st.none(), st.floats(1e-3, 4.0))),
        magnitude=draw(st.sampled_from([1.0, 1.0, 1.0, 10.0, 1e2, 1e3])),
        values_seed=draw(st.integers(0, 2**31 - 1)),
    )


def make_inputs(case: MultilayerCase):
    gen = torch.Generator().manual_seed(case.values_seed)
    make = lambda length, dim, factor: (torch.randn(  # noqa: E731
        case.batch, length, case.heads * dim, generator=gen, dtype=case.dtype) * factor).requires_grad_()
    inputs = {}
    for i in range(case.layers):
        inputs[f"q{i}"] = make(case.query_len, case.head_dim, case.magnitude)
        inputs[f"k{i}"] = make(case.key_len, case.head_dim, case.magnitude)
    for j in range(1 if case.summed_values else case.layers):
        inputs[f"v{j}"] = make(case.key_len, case.value_dim, 1.0)
    return inputs


def lists(inputs):
    return tuple([x for name, x in inputs.items() if name[0] == kind] for kind in "qkv")


def options(case):
    lengths = None if case.key_lengths is None else torch.tensor(case.key_lengths, dtype=torch.int64)
    return dict(num_heads=case.heads, layer_specific=case.layer_specific, key_lengths=lengths, scale=case.scale)


def fused(case, inputs):
    result = multilayer_attention(*lists(inputs), return_probs=True, **options(case))
    return dict(out=result.out, lse=result.lse, probs=result.probs)


def reference(case, inputs):
    out, probs = multilayer_attention_op_reference(*lists(inputs), **options(case))
    return dict(out=out, probs=probs.nan_to_num(0.0))


def lse_is_neg_inf_exactly_for_sentences_without_keys(case, inputs, outputs):
    empty = rows_without_keys(case, case.fused_heads)
    assert torch.equal(torch.isneginf(outputs["lse"]), empty), "lse must be -inf exactly for sentences without keys"
    assert not outputs["probs"][empty].any()


def _arranged(case, xs):
    """n x (B, L, H*D) -> the fused heads' (B, heads', L, pieces*D), as the operator's kernels see them."""
    views = [x.view(x.shape[0], x.shape[1], case.heads, x.shape[2] // case.heads).transpose(1, 2) for x in xs]
    return torch.cat(views, dim=1) if case.layer_specific else torch.cat(views, dim=-1)


def error_scales(case, inputs, grad_outputs):
    """Each output and gradient computed from the absolute values of its terms, on the fused heads."""
    q, k, v = (_arranged(case, xs) for xs in lists(inputs))
    _, probs = multilayer_attention_op_reference(*lists(inputs), **options(case))
    probs = probs.nan_to_num(0.0)
    scale = case.scale if case.scale is not None else (1.0 / math.sqrt(case.head_dim) if case.head_dim else 1.0)
    if not case.value_dim or not probs.numel():
        return {}
    d_out = _arranged(case, grad_outputs["out"].split(case.heads * case.value_dim, dim=-1))
    scales = attention_error_scales(q, k, v, probs, d_out, scale, case.dtype, out=probs @ v)
    per_kind = {kind: scales.pop(f"grad_{kind}") for kind in "qkv"}
    for name in inputs:  # q0, k1, ...: one input per layer
        scales[f"grad_{name}"] = per_kind[name[0]]
    return scales


MULTILAYER = OperatorUnderTest(
    name="mma_nmt::multilayer_attention",
    make_inputs=make_inputs,
    fused=fused,
    reference=reference,
    differentiable=["out"],
    allowed_non_finite=lambda case, inputs, outputs: dict(lse=rows_without_keys(case, case.fused_heads)),
    extra_checks=lse_is_neg_inf_exactly_for_sentences_without_keys,
    error_scales=error_scales,
)


@settings(max_examples=MAX_EXAMPLES)
@given(case=multilayer_cases(), seed=st.integers(0, 2**31 - 1))
def test_multilayer_attention_matches_reference_on_random_cases(case, seed):
    check_against_reference(MULTILAYER, case, seed)


def test_case_strategy_reaches_the_edges():
    def label(case):
        labels = size_and_length_labels(case, ("batch", "query_len", "key_len", "head_dim", "value_dim"))
        labels |= {"layer-specific" if case.layer_specific else "summed values" if case.summed_values else "joint"}
        return labels | {f"{case.layers} layers"} | ({"extreme logits"} if case.magnitude >= 1e3 else set())

    wanted = {"batch", "query_len", "key_len", "head_dim", "value_dim", "empty sentence", "one-key sentence",
              "extreme logits", "torch.float32", "torch.float64", "layer-specific", "summed values", "joint",
              "1 layers", "5 layers"}
    assert_strategy_reaches(multilayer_cases(), label, wanted, 5 * MAX_EXAMPLES)
