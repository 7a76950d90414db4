"""Property-based tests of ``mma_nmt::multihop_second_hop`` (forward and backward) against the reference of SPEC
section 4.

Hypothesis draws the case: batch and query length (up to 3 x 31 positions, so blocks of 32 positions span sentences
and end part-full), head, hop and value sizes in {1, primes, 64} (or no ``u_c``), heads 1..7 and 64, inputs scaled by
up to 30 (tanh saturated) and ``v_b`` by up to 1e3 (the gate one-hot), ``q`` and ``a`` contiguous, position-major
((B, T, H, D) buffers) or slices of wider buffers, float32 and float64.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mma_nmt.ops import multihop_second_hop
from mma_nmt.reference.multihop import head_gate_reference, second_hop_reference
from property_harness import (OperatorUnderTest, assert_strategy_reaches, check_against_reference, gate_sums_to_one,
                              size_and_length_labels, softmax_gradient_terms)

MAX_EXAMPLES = 150
SIZES = [1, 2, 3, 5, 7, 13, 17, 31, 64]


@dataclass(frozen=True)
class SecondHopCase:
    dtype: torch.dtype
    batch: int
    heads: int
    query_len: int
    head_dim: int
    hop_dim: int
    value_dim: int | None  # None: no u_c
    input_magnitude: float
    v_b_magnitude: float
    layout: str  # "contiguous", "slice" (last dim a slice of a wider buffer) or "transposed" ((B, T, H, D) buffer)
    values_seed: int


@st.composite
def second_hop_cases(draw) -> SecondHopCase:
    sizes = st.sampled_from(SIZES)
    heads = draw(st.one_of(st.integers(1, 7), st.just(64)))
    batch = draw(st.sampled_from([0, 1, 1, 2, 3]))
    query_len = draw(st.sampled_from([1, 2, 5, 13, 31]))
    if heads == 64:
        batch, query_len = min(batch, 2), min(query_len, 5)
    return SecondHopCase(
        dtype=draw(st.sampled_from([torch.float32, torch.float64])),
        batch=batch,
        heads=heads,
        query_len=query_len,
        head_dim=draw(sizes),
        hop_dim=draw(sizes),
        value_dim=draw(st.one_of(sizes, st.none())),
        input_magnitude=draw(st.sampled_from([1.0, 1.0, 0.01, 30.0])),
        v_b_magnitude=draw(st.sampled_from([1.0, 1.0, 0.0, 10.0, 1e3])),
        layout=draw(st.sampled_from(["contiguous", "slice", "transposed"])),
        values_seed=draw(st.integers(0, 2**31 - 1)),
    )


def make_inputs(case: SecondHopCase):
    gen = torch.Generator().manual_seed(case.values_seed)
    B, H, T, D = case.batch, case.heads, case.query_len, case.head_dim

    def rows():
        if case.layout == "slice":
            t = torch.randn(B, H, T, D + 3, generator=gen, dtype=case.dtype)[..., 1:D + 1]
        elif case.layout == "transposed":
            t = torch.randn(B, T, H, D, generator=gen, dtype=case.dtype).transpose(1, 2)
        else:
            t = torch.randn(B, H, T, D, generator=gen, dtype=case.dtype)
        return (t * case.input_magnitude).requires_grad_()

    def weight(*shape, magnitude):
        return (torch.randn(*shape, generator=gen, dtype=case.dtype) * magnitude).requires_grad_()

    inputs = dict(q=rows(), a=rows(), w_b=weight(case.hop_dim, D, magnitude=D**-0.5),
                  u_b=weight(H, case.hop_dim, D, magnitude=D**-0.5),
                  v_b=weight(case.hop_dim, magnitude=case.v_b_magnitude))
    if case.value_dim is not None:
        inputs["u_c"] = weight(H, case.value_dim, D, magnitude=D**-0.5)
    return inputs


def fused(case, inputs):
    out, gate = multihop_second_hop(inputs["q"], inputs["a"], inputs["w_b"], inputs["u_b"], inputs.get("u_c"),
                                    inputs["v_b"])
    return dict(out=out, gate=gate)


def reference(case, inputs):
    out, gate = second_hop_reference(inputs["q"], inputs["a"], inputs["w_b"], inputs["v_b"], inputs["u_b"],
                                     inputs.get("u_c"))
    return dict(out=out, gate=gate)


def error_scales(case, inputs, grad_outputs):
    """Every output and gradient computed from the absolute values of its terms."""
    if not inputs["q"].numel():
        return {}
    q, a, w_b, u_b, v_b = (inputs[n] for n in ("q", "a", "w_b", "u_b", "v_b"))
    u_c = inputs.get("u_c")
    abs_values = a.abs() if u_c is None else torch.einsum("bhtd,hcd->bhtc", a.abs(), u_c.abs())  # (B, H, T, Dc)
    query_proj, head_proj = torch.einsum("bhtd,ed->bhte", q, w_b), torch.einsum("bhtd,hed->bhte", a, u_b)
    values = a if u_c is None else torch.einsum("bhtd,hcd->bhtc", a, u_c)
    _, gate = head_gate_reference(query_proj, head_proj, values, v_b)
    tanh = torch.tanh(query_proj + head_proj)
    grad_out = grad_outputs["out"].abs()
    d_gate = grad_outputs["gate"].abs() + (grad_out * abs_values).sum(-1)  # (B, H, T)
    d_e = softmax_gradient_terms(gate, d_gate, 1)
    d_pre = d_e.unsqueeze(-1) * v_b.abs() * (1 - tanh**2)  # (B, H, T, Db)
    d_values = gate.unsqueeze(-1) * grad_out  # (B, H, T, Dc)
    to_a = d_values if u_c is None else torch.einsum("bhtc,hcd->bhtd", d_values, u_c.abs())
    scales = dict(
        out=(gate.unsqueeze(-1) * abs_values).max().item(),
        grad_q=torch.einsum("bhte,ed->bhtd", d_pre, w_b.abs()).max().item(),
        grad_a=(torch.einsum("bhte,hed->bhtd", d_pre, u_b.abs()) + to_a).max().item(),
        grad_w_b=torch.einsum("bhte,bhtd->ed", d_pre, q.abs()).max().item(),
        grad_u_b=torch.einsum("bhte,bhtd->hed", d_pre, a.abs()).max().item(),
        grad_v_b=(d_e.unsqueeze(-1) * tanh.abs()).sum((0, 1, 2)).max().item())
    if u_c is not None:
        scales["grad_u_c"] = torch.einsum("bhtc,bhtd->hcd", d_values, a.abs()).max().item()
    return scales


MULTIHOP_SECOND_HOP = OperatorUnderTest(
    name="mma_nmt::multihop_second_hop",
    make_inputs=make_inputs,
    fused=fused,
    reference=reference,
    differentiable=["out", "gate"],
    extra_checks=gate_sums_to_one,
    error_scales=error_scales,
)


@settings(max_examples=MAX_EXAMPLES)
@given(case=second_hop_cases(), seed=st.integers(0, 2**31 - 1))
def test_multihop_second_hop_matches_reference_on_random_cases(case, seed):
    check_against_reference(MULTIHOP_SECOND_HOP, case, seed)


def test_case_strategy_reaches_the_edges():
    def label(case):
        labels = size_and_length_labels(case, ("batch", "head_dim", "hop_dim"))
        labels |= {case.layout, f"heads{case.heads}" if case.heads in (1, 64) else ""}
        labels |= {"no u_c" if case.value_dim is None else "u_c"}
        labels |= {"blocks across sentences" if case.batch * case.query_len > 32 and case.query_len % 32 else ""}
        return labels | ({"one-hot gate"} if case.v_b_magnitude >= 1e3 and case.input_magnitude >= 1 else set())

    wanted = {"batch", "contiguous", "slice", "transposed", "heads1", "heads64", "no u_c", "u_c",
              "blocks across sentences", "torch.float32", "torch.float64", "one-hot gate"}
    assert_strategy_reaches(second_hop_cases(), label, wanted, 5 * MAX_EXAMPLES)
