"""Operator-agnostic driver of the property-based tests: one random case of one operator against its reference.

An operator joins the property suite with one :class:`OperatorUnderTest` (how to build its inputs from a case, how to
call the fused operator, how to call the plain-PyTorch reference) and a hypothesis strategy of cases; see
``test_properties_attention.py``. The driver checks, for every case:

* outputs and the gradients of every floating input match the reference: in float32 by the accuracy rule of
  ``attention_cases.assert_close_to_double`` (error against a float64 reference at most twice plain PyTorch's, plus a
  1e-5 floor relative to the size of the summed terms when that exceeds 1); in float64 within twice the reference's own
  sensitivity to a relative 2^-40 perturbation of the inputs, plus 1e-11 of the size of the summed terms;
* nothing the fused operator returns is NaN or inf (inputs are finite), except where the operator says a value is
  defined as non-finite (e.g. the log-sum-exp of a query that sees no key);
and counts the cases per operator in :data:`CASE_COUNTS` (printed at the end of the pytest run by conftest.py).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Dict, Sequence

import torch

from attention_cases import assert_close_to_double

Tensors = Dict[str, torch.Tensor]

CASE_COUNTS: Counter = Counter()


@dataclass(frozen=True)
class OperatorUnderTest:
    name: str
    # case -> floating inputs (finite), in the case's dtype; gradients are taken with respect to all of them
    make_inputs: Callable[[Any], Tensors]
    # (case, inputs) -> named outputs of the fused operator
    fused: Callable[[Any, Tensors], Tensors]
    # (case, inputs) -> named outputs of the reference (a subset of fused's names; all of them are compared)
    reference: Callable[[Any, Tensors], Tensors]
    # names of the outputs that are differentiable (gradients flow from them)
    differentiable: Sequence[str]
    # optional (case, inputs, fused outputs) -> {name: bool mask of entries allowed to be non-finite}
    allowed_non_finite: Callable[[Any, Tensors, Tensors], Tensors] | None = None
    # optional (case, inputs, fused outputs) -> None: further checks of values only the fused operator returns
    extra_checks: Callable[[Any, Tensors, Tensors], None] | None = None
    # optional (case, float64 inputs, float64 grad_outputs) -> {name: scale}: the size of the terms each output or
    # gradient sums (its value computed with every term's absolute value), so a result that is exactly 0 by cancellation
    # is judged against the size of what cancelled; without it the size of the result itself is used
    error_scales: Callable[[Any, Tensors, Tensors], Dict[str, float]] | None = None


def _grads(outputs: Tensors, names: Sequence[str], inputs: Tensors, grad_outputs: Tensors) -> Tensors:
    outs = [outputs[n] for n in names]
    grads = torch.autograd.grad(outs, list(inputs.values()), [grad_outputs[n] for n in names], allow_unused=True)
    return {f"grad_{name}": (torch.zeros_like(x) if g is None else g) for (name, x), g in zip(inputs.items(), grads)}


def _reference_with_grads(op: OperatorUnderTest, case, inputs: Tensors, grad_outputs: Tensors) -> Tensors:
    leaves = {name: x.detach().requires_grad_() for name, x in inputs.items()}
    ref = op.reference(case, leaves)
    grad_outputs = {n: g.to(ref[n].dtype) for n, g in grad_outputs.items()}
    return {**{n: t.detach() for n, t in ref.items()}, **_grads(ref, op.differentiable, leaves, grad_outputs)}


def _perturbed(inputs: Tensors, seed: int, relative: float) -> Tensors:
    generator = torch.Generator().manual_seed(seed)
    out = {}
    for name, x in inputs.items():
        signs = torch.randint(0, 2, x.shape, generator=generator).to(x.dtype) * 2 - 1
        out[name] = (x.detach() * (1 + relative * signs)).requires_grad_()
    return out


def _assert_finite(op: OperatorUnderTest, case, inputs: Tensors, results: Tensors):
    allowed = op.allowed_non_finite(case, inputs, results) if op.allowed_non_finite else {}
    for name, t in results.items():
        bad = ~torch.isfinite(t)
        if name in allowed:
            bad &= ~allowed[name]
        assert not bad.any(), f"{op.name}: {name} has {int(bad.sum())} non-finite entries for finite inputs"


def check_against_reference(op: OperatorUnderTest, case, seed: int) -> None:
    """Runs one case; raises AssertionError on any mismatch."""
    CASE_COUNTS[op.name] += 1
    inputs = op.make_inputs(case)
    fused_outputs = op.fused(case, inputs)
    generator = torch.Generator().manual_seed(seed)
    grad_outputs = {n: torch.randn(fused_outputs[n].shape, generator=generator, dtype=fused_outputs[n].dtype)
                    for n in op.differentiable}
    fused = {**{n: t.detach() for n, t in fused_outputs.items()},
             **_grads(fused_outputs, op.differentiable, inputs, grad_outputs)}
    _assert_finite(op, case, inputs, fused)
    if op.extra_checks:
        op.extra_checks(case, inputs, fused)

    same_precision = _reference_with_grads(op, case, inputs, grad_outputs)
    doubles = {name: x.detach().double() for name, x in inputs.items()}
    scales = {}
    if op.error_scales:
        scales = op.error_scales(case, doubles, {n: g.double() for n, g in grad_outputs.items()})

    def scale_of(name, result):
        return max(1.0, scales.get(name, 0.0), result.abs().max().item())

    if inputs and next(iter(inputs.values())).dtype == torch.float64:
        wiggled = _reference_with_grads(op, case, _perturbed(inputs, seed, 2.0**-40), grad_outputs)
        for n, want in same_precision.items():
            got = fused[n]
            assert got.shape == want.shape, f"{op.name}: {n} has shape {tuple(got.shape)}, not {tuple(want.shape)}"
            if got.numel() == 0:
                continue
            error = (got - want).abs().max().item()
            sensitivity = (wiggled[n] - want).abs().max().item()
            bound = 2 * sensitivity + 1e-11 * scale_of(n, want)
            assert error <= bound, f"{op.name}: {n} differs from the reference by {error:.3g} (bound {bound:.3g})"
        return
    truth = _reference_with_grads(op, case, doubles, grad_outputs)
    for n, low in same_precision.items():
        got, high = fused[n], truth[n]
        assert got.shape == high.shape, f"{op.name}: {n} has shape {tuple(got.shape)}, reference {tuple(high.shape)}"
        if got.numel() == 0:
            continue
        # the rule's 1e-5 floor, relative to the size of the summed terms when they are large
        assert_close_to_double(got, low, high, f"{op.name}: {n}", floor=1e-5 * scale_of(n, high))


def gate_sums_to_one(case, inputs, outputs):
    """extra_checks of the multi-hop operators: the head gate (B, H, T) lies in [0, 1] and sums to 1 over the heads
    within 2 H eps of the case's dtype."""
    gate = outputs["gate"]
    if gate.numel():
        assert (gate >= 0).all() and (gate <= 1).all()
        error = (gate.double().sum(1) - 1).abs().max().item()
        assert error <= 2 * case.heads * torch.finfo(case.dtype).eps, f"gates sum to 1 only within {error:.3g}"


def logit_conditioning(q: torch.Tensor, k: torch.Tensor, scale: float, dtype: torch.dtype) -> float:
    """Factor over the float32 rule's 1e-5 floor that the conditioning of the logits allows: max(1, max |logit| eps /
    1e-5). A relative eps change of q or k moves each logit by |logit| eps, and a kernel that recomputes weights as
    exp(logit - lse) from a saved lse (as flash attention does) carries lse's rounding, |lse| eps, into every weight;
    torch's softmax divides by the sum instead. Outputs and gradients are judged against the size of their terms times
    this factor. ``q`` (..., T, D) and ``k`` (..., S, D) in float64; 1 for float64 cases."""
    logits = (q @ k.transpose(-1, -2)).abs() * scale
    if dtype != torch.float32 or not logits.numel():
        return 1.0
    return max(1.0, logits.max().item() * torch.finfo(torch.float32).eps / 1e-5)


def softmax_gradient_terms(p: torch.Tensor, d_p: torch.Tensor, dim: int) -> torch.Tensor:
    """The softmax gradient p (dp - sum p dp) with the absolute values of its terms: p (|dp| + sum p |dp|) over ``dim``.
    ``d_p`` holds the absolute values already. The difference cancels exactly in some cases (to 0 for one key); an
    error is judged against the size of what cancelled."""
    return p * (d_p + (p * d_p).sum(dim, keepdim=True))


def _largest(t: torch.Tensor) -> float:
    return t.max().item() if t.numel() else 0.0


def attention_error_scales(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, weights: torch.Tensor,
                           d_out: torch.Tensor, scale: float, dtype: torch.dtype,
                           out: torch.Tensor | None = None) -> Dict[str, float]:
    """``error_scales`` of softmax attention ``out = weights @ v`` (float64): out, probs, grad_q, grad_k and grad_v,
    each computed from the absolute values of its terms, times the logits' conditioning (:func:`logit_conditioning`:
    the kernels' weights carry the logits' float32 rounding, flash-style lse; hypothesis found such a case, q/k
    magnitude 100 with head size 3, weights 1e-4 off where torch's were 1e-5).

    ``q`` (B, H, T, D), ``k`` (B, H, S, D), ``weights`` (B, H, T, S); ``v`` (B, H, S, Dv), or (B, 1, S, Dv) for one
    value shared by the heads (grad_v then sums over them). ``d_out`` (B, H, T, Dv). With ``out`` (the reference's),
    d probs_j = |dO v_j| + |dO . out|; without it the second term is bounded by sum |dO| (weights @ |v|)."""
    conditioning = logit_conditioning(q, k, scale, dtype)
    out_terms = weights @ v.abs()
    row_term = ((d_out * out).sum(-1, keepdim=True).abs() if out is not None
                else (d_out.abs() * out_terms).sum(-1, keepdim=True))
    d_logits = weights * ((d_out @ v.transpose(-1, -2)).abs() + row_term) * scale
    grad_v = weights.transpose(-1, -2) @ d_out.abs()
    if v.shape[1] == 1:  # one value for every head
        grad_v = grad_v.sum(1)
    return dict(out=_largest(out_terms) * conditioning,
                probs=conditioning,
                grad_q=_largest(d_logits @ k.abs()) * conditioning,
                grad_k=_largest(d_logits.transpose(-1, -2) @ q.abs()) * conditioning,
                grad_v=_largest(grad_v) * conditioning)


def labels_drawn(strategy, label: Callable[[Any], set], max_examples: int) -> set:
    """Every label that ``label(case)`` gives to the cases hypothesis draws from ``strategy`` in ``max_examples`` tries:
    the evidence that a strategy can reach the edges it is meant to reach. Drawing is cheap, so callers draw more cases
    than their property test runs; which of them a derandomized property test meets depends on its seed."""
    from hypothesis import given, settings

    seen: set = set()

    @settings(max_examples=max_examples, database=None)
    @given(case=strategy)
    def collect(case):
        seen.update(label(case))

    collect()
    return seen


def assert_strategy_reaches(strategy, label: Callable[[Any], set], wanted: set, max_examples: int) -> None:
    """Fails unless the cases drawn from ``strategy`` (``labels_drawn``) carry every label of ``wanted``."""
    seen = labels_drawn(strategy, label, max_examples)
    assert wanted <= seen, f"never drawn: {sorted(wanted - seen)}"


def size_and_length_labels(case, sizes: Sequence[str]) -> set:
    """The names of the ``sizes`` that are 0 in ``case``, "empty sentence" / "one-key sentence" when a key length is
    0 / 1, and the dtype (e.g. "torch.float32")."""
    labels = {name for name in sizes if getattr(case, name) == 0} | {str(case.dtype)}
    lengths = getattr(case, "key_lengths", None) or ()
    labels |= {"empty sentence"} if 0 in lengths else set()
    labels |= {"one-key sentence"} if 1 in lengths else set()
    return labels


def sentences_without_keys(case) -> torch.Tensor:
    """(B,) bool: True for the sentences of ``case`` (batch, key_len, key_lengths or None) without a real key."""
    if case.key_len == 0:
        return torch.ones(case.batch, dtype=torch.bool)
    if case.key_lengths is None:
        return torch.zeros(case.batch, dtype=torch.bool)
    return torch.tensor(case.key_lengths, dtype=torch.int64) == 0


def rows_without_keys(case, heads: int) -> torch.Tensor:
    """(B, heads, T) bool: True for the query rows of the sentences without a real key (sentences_without_keys)."""
    return sentences_without_keys(case).view(-1, 1, 1).expand(case.batch, heads, case.query_len)
