"""Property-based tests of ``mma_nmt::gmm_attention`` (forward and backward) against the reference of SPEC section 5
(bad calls: test_gmm_attention_errors.py).

Hypothesis draws the case: batch in {1, 2, 3, 5} (or 0), heads in {1, 2, 3} (or 0), query lengths in {1, primes, 16,
17} (or 0), key lengths in {1, primes, 16, 17, 31} (or 0), head and value dims likewise, K in 1..6 components, the three
normalisations (approximate, strict, unnormalised, each with its conversion of network outputs), no padding, random
lengths or lengths with a 0 and a 1 (length-1 sources), network outputs of size 1, 3 or 30 (means at either end of the
sentence, sigma tiny or huge, one-hot or flat omega, the gate at 0 or 1 in float32), sigma forced below the floor or
to 1e4, q and k multiplied by up to 1e3 (logits up to ~1e6), the localness bias or none, the sigma floor, the scale,
the weights asked for or not, float32 and float64. The values come from a seeded torch generator.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gmm_cases import Shape
from gmm_cases import make_inputs as make_gmm_inputs
from mma_nmt.ops import gmm_attention, gmm_conversion
from mma_nmt.ops.gmm_normalization import GMM_NORMALIZATIONS, GmmNormalization
from mma_nmt.reference import gmm_attention_reference
from property_harness import (
    OperatorUnderTest,
    assert_strategy_reaches,
    check_against_reference,
    sentences_without_keys,
    size_and_length_labels,
    softmax_gradient_terms,
)

MAX_EXAMPLES = 200
QUERY_LENGTHS = [1, 2, 3, 5, 7, 13, 16, 17]
KEY_LENGTHS = [1, 2, 3, 5, 7, 13, 16, 17, 31]
DIMS = [1, 2, 3, 5, 8, 13]


@dataclass(frozen=True)
class GmmCase:
    dtype: torch.dtype
    batch: int
    heads: int
    query_len: int
    key_len: int
    head_dim: int
    value_dim: int
    components: int
    normalization: GmmNormalization
    key_lengths: tuple[int, ...] | None
    hat_size: float  # network outputs are N(0, 1) times this (30: saturated sigmoids and softmaxes)
    sigma_override: str  # "none", "below floor" (1e-4) or "huge" (1e4), for some entries
    gate_size: float
    magnitude: float
    local: bool
    sigma_floor: float
    scale: float | None
    return_weights: bool
    values_seed: int


@st.composite
def gmm_cases(draw) -> GmmCase:
    zero = draw(st.sampled_from([None] * 8 + ["batch", "heads", "query_len", "key_len", "head_dim", "value_dim"]))
    batch = 0 if zero == "batch" else draw(st.sampled_from([1, 2, 3, 5]))
    key_len = 0 if zero == "key_len" else draw(st.sampled_from(KEY_LENGTHS))
    padding = draw(st.sampled_from(["none", "random", "with empty and single"]))
    key_lengths = None
    if padding != "none":
        key_lengths = draw(st.lists(st.integers(0, key_len), min_size=batch, max_size=batch))
        if padding == "with empty and single" and batch >= 1:
            key_lengths[-1] = min(1, key_len)
            if batch >= 2:
                key_lengths[0] = 0
        key_lengths = tuple(key_lengths)
    return GmmCase(
        dtype=draw(st.sampled_from([torch.float32, torch.float64])),
        batch=batch,
        heads=0 if zero == "heads" else draw(st.sampled_from([1, 2, 3])),
        query_len=0 if zero == "query_len" else draw(st.sampled_from(QUERY_LENGTHS)),
        key_len=key_len,
        head_dim=0 if zero == "head_dim" else draw(st.sampled_from(DIMS)),
        value_dim=0 if zero == "value_dim" else draw(st.sampled_from(DIMS)),
        components=draw(st.integers(1, 6)),
        normalization=draw(st.sampled_from(GMM_NORMALIZATIONS)),
        key_lengths=key_lengths,
        hat_size=draw(st.sampled_from([1.0, 1.0, 3.0, 30.0])),
        sigma_override=draw(st.sampled_from(["none", "none", "below floor", "huge"])),
        gate_size=draw(st.sampled_from([1.0, 1.0, 30.0])),
        magnitude=draw(st.sampled_from([1.0, 1.0, 10.0, 1e2, 1e3])),
        local=draw(st.booleans()),
        sigma_floor=draw(st.sampled_from([1e-2, 1e-2, 1e-3, 0.5])),
        scale=draw(st.one_of(st.none(), st.floats(1e-3, 4.0))),
        return_weights=draw(st.booleans()),
        values_seed=draw(st.integers(0, 2**31 - 1)),
    )


def lengths_of(case: GmmCase):
    return None if case.key_lengths is None else torch.tensor(case.key_lengths, dtype=torch.int64)


def make_inputs(case: GmmCase):
    gen = torch.Generator().manual_seed(case.values_seed)
    B, H, T, S, K = case.batch, case.heads, case.query_len, case.key_len, case.components

    def randn(*size, std=1.0):
        return torch.randn(*size, generator=gen, dtype=torch.float64) * std

    lengths = lengths_of(case)
    source = lengths if lengths is not None else torch.full((B,), S, dtype=torch.int64)
    hats = [randn(B, H, T, K, std=case.hat_size) for _ in range(3)]
    if case.normalization == "approximate":
        omega, mu, sigma = gmm_conversion.approximate_mixture(*hats, source_lengths=source)
    elif case.normalization == "strict":
        omega, mu, sigma = gmm_conversion.strict_mixture(*hats, source_lengths=source)
    else:
        omega, mu, sigma = gmm_conversion.synthesis_mixture(hats[0], hats[1] - 1.0, hats[2])
    if case.sigma_override != "none":
        chosen = torch.rand(B, H, T, K, generator=gen, dtype=torch.float64) < 0.5
        sigma = torch.where(chosen, torch.full_like(sigma, 1e-4 if case.sigma_override == "below floor" else 1e4),
                            sigma)
    inputs = dict(q=randn(B, H, T, case.head_dim, std=case.magnitude),
                  k=randn(B, H, S, case.head_dim, std=case.magnitude),
                  v=randn(B, H, S, case.value_dim), omega=omega, mu=mu, sigma=sigma,
                  gate=torch.sigmoid(randn(B, H, T, std=case.gate_size)))
    if case.local:
        center, width = gmm_conversion.localness_bias(randn(B, H, T, std=case.hat_size),
                                                      randn(B, H, T, std=case.hat_size), source)
        inputs.update(local_center=center, local_width=width)
    return {name: t.to(case.dtype).detach().requires_grad_() for name, t in inputs.items()}


def options(case: GmmCase):
    return dict(key_lengths=lengths_of(case), normalization=case.normalization, sigma_floor=case.sigma_floor,
                scale=case.scale)


def fused(case, inputs):
    result = gmm_attention(**inputs, **options(case), return_weights=case.return_weights)
    outputs = dict(out=result.out, lse=result.lse, log_mass=result.log_mass)
    if case.return_weights:
        outputs.update(alpha=result.alpha, beta=result.beta, gamma=result.gamma)
    return outputs


def reference(case, inputs):
    opts = options(case)
    if opts["scale"] is None and case.head_dim == 0:
        opts["scale"] = 1.0
    out, alpha, beta, gamma = gmm_attention_reference(**inputs, **opts)
    return dict(out=out, alpha=alpha, beta=beta, gamma=gamma) if case.return_weights else dict(out=out)


def reference_log_mass(case, inputs) -> torch.Tensor:
    """(B, H, T) float64 log of the sum over real keys j and components k of
    omega_k / Z_k exp(-(j - mu_k)^2 / (2 sigma_k^2)), summed in the log domain (no underflow)."""
    omega, mu = inputs["omega"].detach().double(), inputs["mu"].detach().double()
    sigma = inputs["sigma"].detach().double().clamp_min(case.sigma_floor)
    j = torch.arange(case.key_len, dtype=torch.float64).view(-1, 1)  # (S, 1)
    unnormalised = case.normalization == "unnormalised"
    log_z = torch.zeros_like(sigma) if unnormalised else torch.log(math.sqrt(2 * math.pi) * sigma)
    log_terms = (torch.log(omega) - log_z).unsqueeze(-2) - (j - mu.unsqueeze(-2)) ** 2 / (2 * sigma.unsqueeze(-2) ** 2)
    real = torch.ones(case.batch, case.key_len, dtype=torch.bool)
    if case.key_lengths is not None:
        real = torch.arange(case.key_len).view(1, -1) < torch.tensor(case.key_lengths).view(-1, 1)
    log_terms = log_terms.masked_fill(~real.view(case.batch, 1, 1, case.key_len, 1), float("-inf"))
    return torch.logsumexp(log_terms.flatten(-2), dim=-1)  # (B, H, T)


def non_finite_allowed(case, inputs, outputs):
    empty = sentences_without_keys(case).view(-1, 1, 1).expand(case.batch, case.heads, case.query_len)
    underflow = math.log(torch.finfo(case.dtype).tiny) + 2
    return dict(lse=empty, log_mass=reference_log_mass(case, inputs) < underflow)


def statistics_are_right(case, inputs, outputs):
    """lse is -inf exactly for the sentences without keys; log_mass is the log of the mixture's mass on the real keys
    (-inf only where that underflows); a sentence without keys gets no output and passes no gradient."""
    empty = sentences_without_keys(case)
    rows = empty.view(-1, 1, 1).expand(case.batch, case.heads, case.query_len)
    assert torch.equal(torch.isneginf(outputs["lse"]), rows), "lse must be -inf exactly for sentences without keys"
    assert not torch.isnan(outputs["lse"]).any()
    log_mass, want = outputs["log_mass"].double(), reference_log_mass(case, inputs)
    assert not torch.isnan(log_mass).any() and not torch.isposinf(log_mass).any()
    tiny = math.log(torch.finfo(case.dtype).tiny) + 2
    check = (want > tiny) & torch.isfinite(want)
    tol = 1e-4 if case.dtype == torch.float32 else 1e-10
    if check.any():
        error = (log_mass[check] - want[check]).abs() / want[check].abs().clamp_min(1.0)
        assert error.max() <= tol, f"log_mass differs from the log-domain sum by {error.max():.3g}"
    assert not outputs["out"][empty].any()
    for name in ("grad_q", "grad_k", "grad_v", "grad_omega", "grad_mu", "grad_sigma", "grad_gate"):
        assert not outputs[name][empty].any(), f"{name} nonzero for a sentence without keys"


def error_scales(case, inputs, grad_outputs):
    """Each gradient computed from the absolute values of its terms (float64, weights from the reference). The
    softmax's and the strict normalisation's gradients are differences (p (dp - sum p dp)) that cancel exactly in some
    cases, e.g. to 0 for a sentence of one key; they are judged against the size of what cancels."""
    B, H, T, S = case.batch, case.heads, case.query_len, case.key_len
    if not B * H * T * S:
        return {}
    opts = options(case)
    scale = opts["scale"] if opts["scale"] is not None else (1 / math.sqrt(case.head_dim) if case.head_dim else 1.0)
    q, k, v, gate = inputs["q"], inputs["k"], inputs["v"], inputs["gate"].unsqueeze(-1)
    _, alpha, beta, gamma = gmm_attention_reference(**inputs, **{**opts, "scale": scale})
    d_out = grad_outputs["out"]
    dv_abs = d_out.abs() @ v.abs().transpose(-1, -2)  # (B, H, T, S): |dO| |v_j|
    d_alpha = (1 - gate).abs() * dv_abs
    d_logit = softmax_gradient_terms(alpha, d_alpha, -1)
    scales = dict(grad_gate=((alpha + beta.abs()) * dv_abs).sum(-1).max().item())
    if case.value_dim:
        scales["grad_v"] = (gamma.abs().transpose(-1, -2) @ d_out.abs()).max().item()
    if case.head_dim:
        scales.update(grad_q=(d_logit * scale @ k.abs()).max().item(),
                      grad_k=(d_logit.transpose(-1, -2) * scale @ q.abs()).max().item())
    j = torch.arange(S, dtype=torch.float64)
    if case.local:
        width = inputs["local_width"].clamp_min(case.sigma_floor).unsqueeze(-1)
        d = (j - inputs["local_center"].unsqueeze(-1)).abs()
        scales.update(grad_local_center=(d_logit * d / width**2).sum(-1).max().item(),
                      grad_local_width=(d_logit * d**2 / width**3).sum(-1).max().item())
    # mixture: u_j = |d beta_j|, terms t_jk of beta (relative to the row's sum when strict)
    u = gate.abs() * dv_abs
    if case.normalization == "strict":
        u = u + (beta.abs() * u).sum(-1, keepdim=True)
    sigma = inputs["sigma"].clamp_min(case.sigma_floor).unsqueeze(-2)  # (B, H, T, 1, K)
    dist = j.view(-1, 1) - inputs["mu"].unsqueeze(-2)  # (B, H, T, S, K)
    z = torch.ones_like(sigma) if case.normalization == "unnormalised" else math.sqrt(2 * math.pi) * sigma
    log_unit = -(dist**2) / (2 * sigma**2) - torch.log(z)  # log of each term per unit of omega
    real = torch.ones(B, S, dtype=torch.bool) if case.key_lengths is None else (
        torch.arange(S).view(1, -1) < torch.tensor(case.key_lengths).view(-1, 1))
    log_unit = log_unit.masked_fill(~real.view(B, 1, 1, S, 1), float("-inf"))
    if case.normalization == "strict":
        omega = inputs["omega"].unsqueeze(-2)
        log_total = torch.logsumexp((torch.log(omega) + log_unit).flatten(-2), -1).view(B, H, T, 1, 1)
        log_unit = log_unit - torch.where(torch.isfinite(log_total), log_total, torch.zeros_like(log_total))
    unit = torch.exp(log_unit)  # (B, H, T, S, K)
    term = unit * inputs["omega"].abs().unsqueeze(-2)
    u = u.unsqueeze(-1)
    scales.update(grad_omega=(u * unit).sum(-2).max().item(),
                  grad_mu=(u * term * dist.abs() / sigma**2).sum(-2).max().item(),
                  grad_sigma=(u * term * (dist**2 / sigma**3 + 1 / sigma)).sum(-2).max().item())
    return scales


GMM_ATTENTION = OperatorUnderTest(
    name="mma_nmt::gmm_attention",
    make_inputs=make_inputs,
    fused=fused,
    reference=reference,
    differentiable=["out"],
    allowed_non_finite=non_finite_allowed,
    extra_checks=statistics_are_right,
    error_scales=error_scales,
)


@settings(max_examples=MAX_EXAMPLES)
@given(case=gmm_cases(), seed=st.integers(0, 2**31 - 1))
def test_gmm_attention_matches_reference_on_random_cases(case, seed):
    check_against_reference(GMM_ATTENTION, case, seed)


def test_case_strategy_reaches_the_edges():
    def label(case):
        labels = size_and_length_labels(case, ("batch", "heads", "query_len", "key_len", "head_dim", "value_dim"))
        labels |= {f"K{case.components}", case.normalization, case.sigma_override}
        flags = {"saturated network outputs": case.hat_size >= 30, "gate at 0 or 1": case.gate_size >= 30,
                 "extreme logits": case.magnitude >= 1e3, "local": case.local}
        return labels | {name for name, on in flags.items() if on}

    wanted = ({"batch", "heads", "query_len", "key_len", "head_dim", "value_dim", "approximate", "strict",
               "unnormalised", "below floor", "huge", "empty sentence", "one-key sentence", "saturated network outputs",
               "gate at 0 or 1", "extreme logits", "local", "torch.float32", "torch.float64"}
              | {f"K{k}" for k in range(1, 7)})
    assert_strategy_reaches(gmm_cases(), label, wanted, 5 * MAX_EXAMPLES)


# ---- regressions found by the property test ----

def test_strict_reference_agrees_with_the_operator_when_every_term_underflows():
    """Regression: the reference divided an underflowed (all-zero) mixture by its zero sum and returned beta = 0, where
    the operator (and SPEC's ratio) gives weights that sum to 1."""
    shape = Shape(batch=1, heads=1, query_len=2, key_len=4, head_dim=3, value_dim=2, components=2, lengths=None)
    inputs = make_gmm_inputs(shape, normalization="strict", dtype=torch.float64)
    with torch.no_grad():
        inputs["mu"].copy_(torch.tensor([[1.5, 2.5], [0.5, 0.5]]).view(1, 1, 2, 2))
        inputs["sigma"].fill_(0.01)  # exp(-0.25 / 2e-4) = exp(-1250) underflows even in float64
        inputs["omega"].copy_(torch.tensor([[0.25, 0.75], [0.5, 0.5]]).view(1, 1, 2, 2))
    _, _, beta, _ = gmm_attention_reference(**inputs)
    want = torch.tensor([[0.0, 0.125, 0.5, 0.375], [0.5, 0.5, 0.0, 0.0]], dtype=torch.float64).view(1, 1, 2, 4)
    torch.testing.assert_close(beta, want)
    fused_beta = gmm_attention(**inputs, return_weights=True).beta
    torch.testing.assert_close(fused_beta, want)


@pytest.mark.parametrize("normalization", GMM_NORMALIZATIONS)
def test_zero_head_or_value_dim_keeps_weights_statistics_and_gradients(normalization):
    """Regression: with value dim 0 the CPU op skipped the kernel (lse and log_mass -inf, weights 0); with head dim 0
    the backward skipped it (gradients of v, the mixture and the gate 0)."""
    for head_dim, value_dim in [(0, 4), (3, 0)]:
        shape = Shape(batch=2, heads=2, query_len=3, key_len=5, head_dim=head_dim, value_dim=value_dim, lengths=(5, 2))
        inputs = make_gmm_inputs(shape, normalization=normalization, local=True, dtype=torch.float64)
        result = gmm_attention(**inputs, return_weights=True, scale=1.0)
        out, alpha, beta, _ = gmm_attention_reference(**inputs, scale=1.0)
        torch.testing.assert_close(result.alpha, alpha)
        torch.testing.assert_close(result.beta, beta)
        assert torch.isfinite(result.lse).all() and torch.isfinite(result.log_mass).all()
        names = [n for n in ("q", "k", "v", "omega", "mu", "sigma", "gate", "local_center", "local_width")
                 if inputs[n].numel()]
        grad_out = torch.randn_like(out)
        got = torch.autograd.grad(result.out, [inputs[n] for n in names], grad_out, allow_unused=True)
        want = torch.autograd.grad(out, [inputs[n] for n in names], grad_out, allow_unused=True)
        for name, g, w in zip(names, got, want):
            g = torch.zeros_like(inputs[name]) if g is None else g
            w = torch.zeros_like(inputs[name]) if w is None else w
            torch.testing.assert_close(g, w, msg=lambda m: f"{name} (D={head_dim}, Dv={value_dim}): {m}")


@pytest.mark.parametrize("isa", ["default", "avx2", "avx512"])
def test_one_key_passes_no_gradient_to_the_logits(isa, monkeypatch):
    """Regression: the FMA builds contracted the backward's recomputed logit into exp(logit - lse), so with one key the
    dot-product weight was not exactly 1 and q, k and the localness bias got gradients that must be 0."""
    monkeypatch.setenv("MMA_NMT_CPU_ISA", isa)
    shape = Shape(batch=1, heads=1, query_len=3, key_len=1, head_dim=1, value_dim=3, components=1, lengths=None)
    inputs = make_gmm_inputs(shape, local=True, dtype=torch.float32)
    with torch.no_grad():
        inputs["q"].mul_(100.0)
        inputs["k"].mul_(100.0)
    result = gmm_attention(**inputs)
    grads = torch.autograd.grad(result.out, [inputs[n] for n in ("q", "k", "local_center", "local_width")],
                                torch.randn_like(result.out))
    for name, grad in zip(("q", "k", "local_center", "local_width"), grads):
        assert not grad.any(), f"grad of {name} is {grad.flatten().tolist()}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("mu", [5.37, 50.37, 500.37])
def test_strict_gradients_with_a_narrow_component_far_from_the_keys(dtype, mu):
    """Regression: the strict backward took the row's mass back from the saved log_mass, whose rounding is |shift| * eps
    relative; with a narrow component far from the sentence (shift ~ -1e9) the weight of the nearest key, 1, came back
    as 0.3 in float32 (forward right, gradients wrong)."""
    q, k = torch.zeros(1, 1, 1, 1, dtype=dtype), torch.zeros(1, 1, 3, 1, dtype=dtype)
    v = torch.randn(1, 1, 3, 2, dtype=dtype, requires_grad=True)
    mixture = dict(omega=torch.full((1, 1, 1, 1), 0.3, dtype=dtype), mu=torch.full((1, 1, 1, 1), mu, dtype=dtype),
                   sigma=torch.full((1, 1, 1, 1), 0.01, dtype=dtype), gate=torch.ones(1, 1, 1, dtype=dtype))
    result = gmm_attention(q, k, v, **mixture, normalization="strict", return_weights=True)
    assert result.beta.flatten().tolist() == [0.0, 0.0, 1.0]
    (grad_v,) = torch.autograd.grad(result.out, v, torch.ones_like(result.out))
    torch.testing.assert_close(grad_v, torch.tensor([0.0, 0.0, 1.0], dtype=dtype).view(1, 1, 3, 1).expand(1, 1, 3, 2))
