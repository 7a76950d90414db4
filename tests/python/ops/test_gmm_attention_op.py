"""The fused GMM cross-attention operator ``mma_nmt::gmm_attention`` against the plain-PyTorch reference of SPEC
section 5: forward, every gradient, gradcheck, opcheck, extreme inputs, empty and one-key tensors, and error messages.
NaN in, NaN out: a NaN in any mixture or localness input reaches the output rows the reference makes NaN, and no
others (issue 19, item 3; the floor of sigma and local_width compared ``sigma >= floor``, false for NaN, and so
replaced a NaN by the floor, hiding a diverged predictor from the trainer's bad-step check). Random cases and more bad
calls: test_properties_gmm_attention.py, test_gmm_attention_errors.py."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils._python_dispatch import TorchDispatchMode

from gmm_cases import Shape, grads_of, make_inputs
from mma_nmt.ops import gmm_attention, gmm_conversion
from mma_nmt.ops.gmm_normalization import GMM_NORMALIZATIONS
from mma_nmt.reference import gmm_attention_reference

FORWARD = torch.ops.mma_nmt.gmm_attention.default
BACKWARD = torch.ops.mma_nmt.gmm_attention_backward.default


SHAPES = {
    "padded": Shape(),
    "odd_no_padding": Shape(batch=1, heads=3, query_len=7, key_len=13, head_dim=5, value_dim=3, lengths=None),
    "one_query": Shape(query_len=1, lengths=(7, 1)),
    "one_key": Shape(key_len=1, lengths=(1, 1)),
    "one_by_one": Shape(query_len=1, key_len=1, lengths=(1, 0)),
    "long": Shape(batch=1, heads=1, query_len=19, key_len=150, head_dim=16, value_dim=16, lengths=(141,)),
}


def run_both(inputs: dict, **extra):
    fused = gmm_attention(**inputs, **extra)
    ref = gmm_attention_reference(**inputs)
    return fused, ref


def assert_close_grads(inputs, fused_out, ref_out, *, rtol, atol, seed=1):
    grad_out = torch.randn(fused_out.shape, generator=torch.Generator().manual_seed(seed), dtype=fused_out.dtype)
    fused = grads_of(fused_out, inputs, grad_out)
    ref = grads_of(ref_out, inputs, grad_out)
    for name in fused:
        torch.testing.assert_close(fused[name], ref[name], rtol=rtol, atol=atol, msg=lambda m: f"grad of {name}: {m}")


@pytest.mark.parametrize("normalization", GMM_NORMALIZATIONS)
@pytest.mark.parametrize("components", [1, 2, 4])
@pytest.mark.parametrize("shape_name", list(SHAPES))
def test_gmm_attention_matches_reference(shape_name, components, normalization):
    shape = Shape(**{**SHAPES[shape_name].__dict__, "components": components})
    inputs = make_inputs(shape, normalization=normalization, local=components == 2, seed=components)
    fused, (ref_out, alpha, beta, gamma) = run_both(inputs, return_weights=True)
    torch.testing.assert_close(fused.out, ref_out, rtol=1e-9, atol=1e-10)
    torch.testing.assert_close(fused.alpha, alpha.detach())
    torch.testing.assert_close(fused.beta, beta.detach())
    torch.testing.assert_close(fused.gamma, gamma.detach())
    assert_close_grads(inputs, fused.out, ref_out, rtol=1e-8, atol=1e-9)


@settings(max_examples=25, deadline=None)
@given(data=st.data(), normalization=st.sampled_from(GMM_NORMALIZATIONS), local=st.booleans())
def test_random_shapes_match_reference(data, normalization, local):
    sizes = {name: data.draw(st.integers(1, high), label=name) for name, high in
             [("batch", 3), ("heads", 3), ("query_len", 9), ("key_len", 140), ("head_dim", 17), ("value_dim", 9),
              ("components", 5)]}
    lengths = tuple(data.draw(st.integers(0, sizes["key_len"]), label="length") for _ in range(sizes["batch"]))
    inputs = make_inputs(Shape(**sizes, lengths=lengths), normalization=normalization, local=local,
                         seed=data.draw(st.integers(0, 2**16), label="seed"))
    fused, (ref_out, *_) = run_both(inputs)
    torch.testing.assert_close(fused.out, ref_out, rtol=1e-9, atol=1e-10)
    assert_close_grads(inputs, fused.out, ref_out, rtol=1e-8, atol=1e-9)


@pytest.mark.parametrize("isa", ["default", "avx2", "avx512"])
@pytest.mark.parametrize("normalization", GMM_NORMALIZATIONS)
def test_every_cpu_build_matches_reference_in_float32(isa, normalization, monkeypatch):
    monkeypatch.setenv("MMA_NMT_CPU_ISA", isa)
    shape = Shape(batch=2, heads=2, query_len=21, key_len=140, head_dim=16, value_dim=8, components=4,
                  lengths=(140, 77))
    inputs = make_inputs(shape, normalization=normalization, local=True, dtype=torch.float32, seed=3)
    fused, (ref_out, *_) = run_both(inputs)
    torch.testing.assert_close(fused.out, ref_out, rtol=2e-4, atol=2e-5)
    assert_close_grads(inputs, fused.out, ref_out, rtol=2e-3, atol=2e-4)


class _KernelResults(TorchDispatchMode):
    """Records the results of every ``mma_nmt::gmm_attention`` kernel call (below autograd)."""

    def __init__(self):
        super().__init__()
        self.results = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func is FORWARD:
            self.results.append(out)
        return out


def test_fast_path_returns_no_weights():
    """An eager call that needs gradients takes the eager fast path of mma_nmt/ops/registration.py (the C++ autograd
    of csrc/eager/gmm_function.h around the kernel, not torch.library's wrapper), and without ``return_weights`` the
    kernel builds no (B, H, T, S) weights: its alpha and beta results are empty and the result holds None."""
    inputs = make_inputs(Shape())
    with _KernelResults() as kernel:
        result = gmm_attention(**inputs)
    assert result.out.grad_fn.name() == "torch::autograd::CppNode<mma_nmt::eager::GmmFunction>"
    (outputs,) = kernel.results
    assert [tuple(weights.shape) for weights in outputs[5:]] == [(0,), (0,)]
    assert result.alpha is None and result.beta is None and result.gamma is None
    with _KernelResults() as kernel:
        gmm_attention(**inputs, return_weights=True)
    assert [tuple(weights.shape) for weights in kernel.results[0][5:]] == [(2, 2, 5, 7)] * 2


def test_padding_keys_get_no_weight_and_no_gradient():
    inputs = make_inputs(Shape(lengths=(7, 3)))
    result = gmm_attention(**inputs, return_weights=True)
    assert torch.all(result.gamma[1, :, :, 3:] == 0)
    grads = grads_of(result.out, inputs, torch.ones_like(result.out))
    assert torch.all(grads["k"][1, :, 3:] == 0) and torch.all(grads["v"][1, :, 3:] == 0)


@pytest.mark.parametrize("normalization", GMM_NORMALIZATIONS)
@pytest.mark.parametrize("local", [False, True])
def test_gradcheck_float64(normalization, local):
    inputs = make_inputs(Shape(batch=1, heads=2, query_len=3, key_len=4, head_dim=3, value_dim=2, lengths=(3,)),
                         normalization=normalization, local=local, seed=5)
    names = [n for n in ("q", "k", "v", "omega", "mu", "sigma", "gate", "local_center", "local_width") if n in inputs]
    fixed = {n: inputs[n] for n in ("key_lengths", "normalization")}

    def fn(*tensors):
        return gmm_attention(**dict(zip(names, tensors)), **fixed).out

    assert torch.autograd.gradcheck(fn, [inputs[n] for n in names])


@pytest.mark.parametrize("local,lengths,weights", [(False, (7, 3), False), (True, None, True), (False, (0, 7), True)])
def test_opcheck(local, lengths, weights):
    i = make_inputs(Shape(lengths=lengths), local=local, dtype=torch.float32)
    args = (i["q"], i["k"], i["v"], i["key_lengths"], i["omega"], i["mu"], i["sigma"], i["gate"],
            i.get("local_center"), i.get("local_width"), 0.35, 1, 1e-2, weights)
    torch.library.opcheck(FORWARD, args)


def _extreme_inputs(normalization: str) -> dict:
    shape = Shape(batch=3, heads=1, query_len=6, key_len=9, components=3, lengths=(9, 1, 0))
    inputs = make_inputs(shape, normalization=normalization, dtype=torch.float32, local=True)
    with torch.no_grad():
        inputs["q"].mul_(1e3)  # logits of size ~1e3 to 1e4
        inputs["mu"].copy_(torch.tensor([0.0, 9.0, -1e4]).expand_as(inputs["mu"]))  # either end, far outside
        inputs["mu"][:, :, :, 1] = torch.tensor([1e6, 4.5, 8.0, 0.0, 1.0, 9.0])
        inputs["sigma"].copy_(torch.tensor([0.0, 1e-8, 1e8]).expand_as(inputs["sigma"]))
        inputs["omega"][:, :, 2] = 1e12
        inputs["local_width"].fill_(0.0)
    return inputs


@pytest.mark.parametrize("normalization", GMM_NORMALIZATIONS)
def test_extreme_parameters_stay_finite(normalization):
    inputs = _extreme_inputs(normalization)
    result = gmm_attention(**inputs, return_weights=True)
    assert torch.isfinite(result.out).all() and torch.isfinite(result.beta).all()
    grads = grads_of(result.out, inputs, torch.ones_like(result.out))
    for name, grad in grads.items():
        assert torch.isfinite(grad).all(), name
    assert torch.all(result.out[2] == 0), "a sentence without keys has zero output"


def test_strict_normalisation_sums_to_one_even_when_every_term_underflows():
    inputs = make_inputs(Shape(components=2, lengths=(7, 3)), normalization="strict", dtype=torch.float32)
    with torch.no_grad():
        inputs["mu"].fill_(2.5)  # between two keys ...
        inputs["sigma"].fill_(0.02)  # ... so narrow that exp(-(0.5)^2 / (2 sigma^2)) underflows in float32
    result = gmm_attention(**inputs, return_weights=True)
    sums = result.beta.sum(-1)
    torch.testing.assert_close(sums, torch.ones_like(sums))
    assert torch.isfinite(grads_of(result.out, inputs, torch.ones_like(result.out))["mu"]).all()


def test_approximate_normalisation_keeps_most_mass_inside_the_sentence():
    gen = torch.Generator().manual_seed(7)
    lengths = torch.randint(10, 120, (64,), generator=gen)
    hats = [torch.randn(64, 8, 16, 4, generator=gen, dtype=torch.float64) for _ in range(3)]
    omega, mu, sigma = gmm_conversion.approximate_mixture(*hats, source_lengths=lengths)
    continuous = gmm_conversion.mixture_mass_inside(omega, mu, sigma, source_lengths=lengths)  # (B, H, T)
    assert continuous.min() > 0.9, f"continuous mass inside [0, J] as low as {continuous.min():.3f}"
    # The discrete weights the operator applies to the J real keys, summed over the sentence.
    S = int(lengths.max())
    queries, keys = torch.zeros(64, 8, 16, 1, dtype=torch.float64), torch.zeros(64, 8, S, 1, dtype=torch.float64)
    result = gmm_attention(queries, keys, keys, omega=omega, mu=mu,
                           sigma=sigma, gate=torch.ones(64, 8, 16, dtype=torch.float64), key_lengths=lengths)
    discrete = result.log_mass.exp()  # (B, H, T); above 1 where a narrow component sits on a key
    assert discrete.mean() > 0.9, f"mean mixture mass on the sentence's keys {discrete.mean():.3f}"
    share = (discrete > 0.9).double().mean()
    assert share > 0.95, f"only {share:.3f} of the queries keep 90% of the mixture mass on the sentence's keys"


def _bad(name, **changes):
    return pytest.param(name, changes, id=name)


@pytest.mark.parametrize("name,changes", [
    _bad("q", q=torch.zeros(2, 5, 8)),
    _bad("k", k=torch.zeros(2, 2, 7, 9)),
    _bad("v", v=torch.zeros(2, 2, 6, 6)),
    _bad("omega", omega=torch.zeros(2, 2, 5)),
    _bad("mu", mu=torch.zeros(2, 2, 5, 3)),
    _bad("sigma", sigma=torch.ones(2, 2, 5, 2, dtype=torch.float64)),
    _bad("gate", gate=torch.zeros(2, 2, 4)),
    _bad("key_lengths", key_lengths=torch.tensor([8, 3])),
    _bad("local_center", local_center=torch.zeros(2, 2, 5)),
    _bad("sigma_floor", sigma_floor=0.0),
    _bad("normalization", normalization="exact"),
    _bad("omega", omega=torch.zeros(2, 2, 5, 2, device="meta")),
])
def test_bad_input_raises_error_naming_the_argument(name, changes):
    inputs = {n: (t.detach() if isinstance(t, torch.Tensor) else t)
              for n, t in make_inputs(Shape(), dtype=torch.float32).items()}
    inputs.update(changes)
    with pytest.raises((ValueError, TypeError, RuntimeError), match=name):
        gmm_attention(**inputs)


def test_conversions_follow_the_papers_table_1_and_stay_finite():
    gen = torch.Generator().manual_seed(11)
    lengths = torch.tensor([1, 9, 40])
    hats = [torch.randn(3, 2, 6, 4, generator=gen, dtype=torch.float64) * 3 for _ in range(3)]
    J = lengths.view(-1, 1, 1, 1).double()
    omega, mu, sigma = gmm_conversion.approximate_mixture(*hats, source_lengths=lengths)
    torch.testing.assert_close(omega.sum(-1), torch.ones(3, 2, 6, dtype=torch.float64))
    assert torch.all((mu >= 0) & (mu <= J))
    assert torch.all(sigma <= torch.minimum(J / 6, torch.minimum(mu / 3, (J - mu) / 3)) + 1e-12)
    _, _, sigma_strict = gmm_conversion.strict_mixture(*hats, source_lengths=lengths)
    torch.testing.assert_close(sigma_strict, J / (1 + torch.exp(-hats[2])))
    omega, mu, sigma = gmm_conversion.synthesis_mixture(*hats)
    assert torch.all(mu[:, :, 1:] >= mu[:, :, :-1]), "synthesis means move forward along the target"
    torch.testing.assert_close(sigma, torch.sqrt(torch.exp(-hats[2]) / 2))
    huge = [torch.full((1, 1, 3, 2), value, dtype=torch.float32) for value in (1e4, 1e4, -1e4)]
    assert all(torch.isfinite(t).all() for t in gmm_conversion.synthesis_mixture(*huge))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_approximate_sigma_is_the_minimum_formula_to_the_bit_nan_included(dtype):
    """sigma = min(J/6 sigmoid(sigma^), mu/3, (J - mu)/3), computed with ``where`` for a cheaper backward: equal to the
    ``torch.minimum`` formula bit for bit, NaN where a network output is, and with the same gradients (no ties here)."""
    gen = torch.Generator().manual_seed(5)
    lengths = torch.tensor([1, 9, 40, 3])
    hats = [(torch.randn(4, 2, 6, 4, generator=gen, dtype=torch.float64) * 3).to(dtype) for _ in range(3)]
    hats[1][0, 0, 1, 2] = float("nan")  # a mean: both inner candidates NaN
    hats[2][1, 1, 3, 0] = float("nan")  # a width: the outer candidate NaN
    hats = [h.requires_grad_() for h in hats]
    _, mu, sigma = gmm_conversion.approximate_mixture(*hats, source_lengths=lengths)
    J = lengths.view(-1, 1, 1, 1).to(dtype)
    expected_mu = J * torch.sigmoid(hats[1])
    expected = torch.minimum(J / 6 * torch.sigmoid(hats[2]), torch.minimum(expected_mu / 3, (J - expected_mu) / 3))
    assert torch.equal(sigma.isnan(), expected.isnan()) and int(sigma.isnan().sum()) == 2
    torch.testing.assert_close(sigma, expected, rtol=0, atol=0, equal_nan=True)
    finite = ~expected.isnan()
    weights = torch.rand(sigma.shape, generator=gen, dtype=torch.float64).to(dtype) * finite
    got = torch.autograd.grad(sigma.nan_to_num().mul(weights).sum(), hats[1:])
    want = torch.autograd.grad(expected.nan_to_num().mul(weights).sum(), hats[1:])
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, equal_nan=True)


NAN_AT = (0, 1, 2)  # (batch, head, query row)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("normalization", GMM_NORMALIZATIONS)
@pytest.mark.parametrize("name", ["sigma", "local_width", "mu", "omega", "local_center", "gate"])
def test_nan_input_gives_nan_output_where_the_reference_does(name, normalization, dtype):
    inputs = make_inputs(Shape(lengths=(7, 5)), normalization=normalization, local=True, dtype=dtype, seed=3)
    with torch.no_grad():
        inputs[name][NAN_AT] = float("nan")  # the whole row's value (gate, local_*) or its first component
    fused = gmm_attention(**inputs).out
    reference = gmm_attention_reference(**inputs)[0]
    nan_rows = reference.isnan().any(-1)
    assert nan_rows[NAN_AT] and int(nan_rows.sum()) == 1  # the reference: exactly that query row
    assert torch.equal(fused.isnan(), reference.isnan())
    torch.testing.assert_close(fused[~nan_rows], reference[~nan_rows].detach())


@pytest.mark.parametrize("name", ["sigma", "local_width"])
def test_nan_below_the_floor_does_not_become_the_floor(name):
    """The floor applies to small values only: a NaN sigma or width is not "below the floor"."""
    inputs = make_inputs(Shape(lengths=None), local=True, seed=4)
    with torch.no_grad():
        inputs[name].fill_(float("nan"))
    assert gmm_attention(**inputs, sigma_floor=0.5).out.isnan().all()


@pytest.mark.parametrize("shape", [
    Shape(batch=0, lengths=None), Shape(heads=0, lengths=None), Shape(query_len=0), Shape(key_len=0, lengths=(0, 0)),
    Shape(head_dim=0), Shape(value_dim=0), Shape(key_len=1, lengths=(1, 0)),
])
def test_forward_and_backward_on_empty_and_single_key_tensors(shape):
    i = make_inputs(shape, local=True, dtype=torch.float32)
    t = {n: (x.detach() if isinstance(x, torch.Tensor) else x) for n, x in i.items()}
    args = (t["q"], t["k"], t["v"], t["key_lengths"], t["omega"], t["mu"], t["sigma"], t["gate"], t["local_center"],
            t["local_width"], 1.0, 0, 1e-2)
    out, lse, log_mass, alpha_context, beta_context, _, _ = FORWARD(*args, False)
    grads = BACKWARD(torch.randn_like(out), *args[:10], lse, log_mass, alpha_context, beta_context, *args[10:])
    for name, grad, like in zip(("q", "k", "v", "omega", "mu", "sigma", "gate", "local_center", "local_width"), grads,
                                args[:3] + args[4:10]):
        assert grad.shape == like.shape, name
        assert torch.isfinite(grad).all(), name
    assert torch.isfinite(out).all()
