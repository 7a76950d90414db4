"""Property-based tests of ``mma_nmt::multihop_gate`` (forward and backward) against the reference of SPEC section 4
(bad calls: test_multihop_gate_errors.py).

Hypothesis draws the case: batch, query length and dims in {1, primes, ...} (or 0), heads 1..7 and the limit 64,
projections multiplied by up to 1e3 (tanh saturated) and ``v_b`` by up to 1e4 (head logits up to ~1e6: the gate is
one-hot), strided views (a slice of a wider projection, transposed (B, T, H, D) buffers), float32 and float64.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mma_nmt.ops import multihop_gate
from mma_nmt.reference.multihop import head_gate_reference
from property_harness import (
    OperatorUnderTest,
    assert_strategy_reaches,
    check_against_reference,
    gate_sums_to_one,
    size_and_length_labels,
    softmax_gradient_terms,
)

MAX_EXAMPLES = 200
SIZES = [1, 2, 3, 5, 7, 13, 17, 31]


@dataclass(frozen=True)
class GateCase:
    dtype: torch.dtype
    batch: int
    heads: int
    query_len: int
    hop_dim: int
    value_dim: int
    proj_magnitude: float
    v_b_magnitude: float
    layout: str  # "contiguous", "slice" (last dim a slice of a wider buffer) or "transposed" ((B, T, H, D) buffer)
    values_seed: int


@st.composite
def gate_cases(draw) -> GateCase:
    zero = draw(st.sampled_from([None] * 12 + ["batch", "query_len", "hop_dim", "value_dim"]))
    sizes = st.sampled_from(SIZES)
    heads = draw(st.one_of(st.integers(1, 7), st.just(64)))
    batch = 0 if zero == "batch" else draw(st.sampled_from([1, 2, 3, 5]))
    query_len = 0 if zero == "query_len" else draw(sizes)
    if heads == 64:
        batch, query_len = min(batch, 2), min(query_len, 3)
    return GateCase(
        dtype=draw(st.sampled_from([torch.float32, torch.float64])),
        batch=batch,
        heads=heads,
        query_len=query_len,
        hop_dim=0 if zero == "hop_dim" else draw(sizes),
        value_dim=0 if zero == "value_dim" else draw(sizes),
        proj_magnitude=draw(st.sampled_from([1.0, 1.0, 0.01, 10.0, 1e3])),
        v_b_magnitude=draw(st.sampled_from([1.0, 1.0, 0.0, 10.0, 1e2, 1e4])),
        layout=draw(st.sampled_from(["contiguous", "slice", "transposed"])),
        values_seed=draw(st.integers(0, 2**31 - 1)),
    )


def make_inputs(case: GateCase):
    gen = torch.Generator().manual_seed(case.values_seed)
    B, H, T = case.batch, case.heads, case.query_len

    def one(dim, magnitude):
        if case.layout == "slice":
            t = torch.randn(B, H, T, dim + 3, generator=gen, dtype=case.dtype)[..., 1:dim + 1]
        elif case.layout == "transposed":
            t = torch.randn(B, T, H, dim, generator=gen, dtype=case.dtype).transpose(1, 2)
        else:
            t = torch.randn(B, H, T, dim, generator=gen, dtype=case.dtype)
        return (t * magnitude).requires_grad_()

    v_b = torch.randn(case.hop_dim, generator=gen, dtype=case.dtype) * case.v_b_magnitude
    return dict(query_proj=one(case.hop_dim, case.proj_magnitude), head_proj=one(case.hop_dim, case.proj_magnitude),
                value_proj=one(case.value_dim, 1.0), v_b=v_b.requires_grad_())


def fused(case, inputs):
    out, gate = multihop_gate(inputs["query_proj"], inputs["head_proj"], inputs["value_proj"], inputs["v_b"])
    return dict(out=out, gate=gate)


def reference(case, inputs):
    out, gate = head_gate_reference(inputs["query_proj"], inputs["head_proj"], inputs["value_proj"], inputs["v_b"])
    return dict(out=out, gate=gate)


def error_scales(case, inputs, grad_outputs):
    """Every gradient computed from the absolute values of its terms."""
    x = inputs["query_proj"] + inputs["head_proj"]
    value_proj, v_b = inputs["value_proj"], inputs["v_b"]
    _, gate = head_gate_reference(inputs["query_proj"], inputs["head_proj"], value_proj, v_b)
    d_gate = grad_outputs["gate"].abs() + (grad_outputs["out"] * value_proj).abs().sum(-1)  # (B, H, T)
    d_e = softmax_gradient_terms(gate, d_gate, 1)  # (B, H, T)
    tanh = torch.tanh(x)
    d_x = d_e.unsqueeze(-1) * v_b.abs() * (1 - tanh**2)
    if not x.numel():
        return {}
    return dict(grad_query_proj=d_x.max().item(), grad_head_proj=d_x.max().item(),
                grad_v_b=(d_e.unsqueeze(-1) * tanh.abs()).sum((0, 1, 2)).max().item() if v_b.numel() else 0.0)


MULTIHOP_GATE = OperatorUnderTest(
    name="mma_nmt::multihop_gate",
    make_inputs=make_inputs,
    fused=fused,
    reference=reference,
    differentiable=["out", "gate"],
    extra_checks=gate_sums_to_one,
    error_scales=error_scales,
)


@settings(max_examples=MAX_EXAMPLES)
@given(case=gate_cases(), seed=st.integers(0, 2**31 - 1))
def test_multihop_gate_matches_reference_on_random_cases(case, seed):
    check_against_reference(MULTIHOP_GATE, case, seed)


def test_case_strategy_reaches_the_edges():
    def label(case):
        labels = size_and_length_labels(case, ("batch", "query_len", "hop_dim", "value_dim"))
        labels |= {case.layout, f"heads{case.heads}" if case.heads in (1, 64) else ""}
        one_hot = case.v_b_magnitude >= 1e4 and case.proj_magnitude >= 1
        return labels | ({"one-hot gate"} if one_hot else set())

    wanted = {"batch", "query_len", "hop_dim", "value_dim", "contiguous", "slice", "transposed", "heads1", "heads64",
              "torch.float32", "torch.float64", "one-hot gate"}
    assert_strategy_reaches(gate_cases(), label, wanted, 5 * MAX_EXAMPLES)
