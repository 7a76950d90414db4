"""Every operator and every backward operator through ``torch.library.opcheck`` with transposed and sliced inputs:
its fake test runs the real and the fake kernel side by side (``CrossRefFakeMode``) and compares shapes *and strides*
of every result. A fake kernel that keeps an input's strides where the real kernel returns a contiguous tensor passes
with contiguous inputs only, and then breaks ``torch.compile`` in the backward (issue 19, item 0; the whole-step test
is ``test_compile_training.py``).

Layouts: ``transposed`` builds the (B, H, L, D) inputs as head views of (B, L, H, D) projections (what the modules
pass), ``sliced`` as the first columns of a wider buffer (a split joint projection), ``contiguous`` as they are.
"""

from __future__ import annotations

import pytest
import torch
from torch.library import opcheck

OPS = torch.ops.mma_nmt
LAYOUTS = ("contiguous", "transposed", "sliced")


def laid_out(shape: tuple[int, ...], layout: str, *, seed: int, scale: float = 1.0) -> torch.Tensor:
    """A float64 tensor of ``shape`` (3-d or 4-d) with the given memory layout and N(0, scale^2) values."""
    g = torch.Generator().manual_seed(seed)
    if layout == "transposed" and len(shape) == 4:  # (B, H, L, D) head view of (B, L, H, D)
        b, h, length, d = shape
        return (scale * torch.randn(b, length, h, d, generator=g, dtype=torch.float64)).transpose(1, 2)
    if layout == "transposed" and len(shape) == 3:  # (B, L, E) view of (L, B, E)
        return (scale * torch.randn(shape[1], shape[0], shape[2], generator=g, dtype=torch.float64)).transpose(0, 1)
    if layout == "sliced":
        wide = scale * torch.randn(*shape[:-1], shape[-1] + 3, generator=g, dtype=torch.float64)
        return wide[..., : shape[-1]]
    return scale * torch.randn(*shape, generator=g, dtype=torch.float64)


def assert_fake_matches_real(op, args):
    opcheck(op, args, test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_dynamic"))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_attention_fakes_report_the_real_strides(layout):
    q = laid_out((2, 3, 5, 4), layout, seed=1)
    k, v = laid_out((2, 3, 6, 4), layout, seed=2), laid_out((2, 3, 6, 5), layout, seed=3)
    lengths = torch.tensor([6, 3])
    options = ([0, 1, 2], 1, 0.5, 0, 0.0, 0)
    assert_fake_matches_real(OPS.attention.default, (q, k, v, lengths, *options))
    out, lse, _ = OPS.attention(q, k, v, lengths, *options)
    grad_out = laid_out(tuple(out.shape), layout, seed=4)
    assert_fake_matches_real(OPS.attention_backward.default, (grad_out, q, k, v, out, lse, lengths, *options))


@pytest.mark.parametrize("local", [False, True])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_gmm_attention_fakes_report_the_real_strides(layout, local):
    q, k, v = (laid_out(shape, layout, seed=s) for s, shape in enumerate([(2, 3, 5, 4), (2, 3, 6, 4), (2, 3, 6, 5)]))
    omega = laid_out((2, 3, 5, 2), layout, seed=5).softmax(-1)
    mu = laid_out((2, 3, 5, 2), layout, seed=6, scale=3.0).abs()
    sigma = laid_out((2, 3, 5, 2), layout, seed=7).abs() + 0.5
    rows = laid_out((2, 3, 5, 1), layout, seed=8)[..., 0]  # (B, H, T) views of the same layout
    gate = rows.sigmoid()
    center, width = (rows.abs() * 2, rows.abs() + 1) if local else (None, None)
    lengths = torch.tensor([6, 2])
    inputs = (q, k, v, lengths, omega, mu, sigma, gate, center, width, 0.5, 1, 0.01)
    assert_fake_matches_real(OPS.gmm_attention.default, inputs)
    out, lse, log_mass, alpha_context, beta_context, _, _ = OPS.gmm_attention(*inputs)
    grad_out = laid_out(tuple(out.shape), layout, seed=9)
    assert_fake_matches_real(OPS.gmm_attention_backward.default,
                             (grad_out, *inputs[:10], lse, log_mass, alpha_context, beta_context, *inputs[10:]))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_shared_value_attention_fakes_report_the_real_strides(layout):
    q, k = laid_out((2, 3, 4, 5), layout, seed=1), laid_out((2, 3, 6, 5), layout, seed=2)
    v = laid_out((2, 6, 7), layout, seed=3)
    lengths = torch.tensor([6, 1])
    assert_fake_matches_real(OPS.shared_value_attention.default, (q, k, v, lengths, 1.0, False))
    out, lse, _ = OPS.shared_value_attention(q, k, v, lengths, 1.0)
    grad_out = laid_out(tuple(out.shape), layout, seed=4)
    assert_fake_matches_real(OPS.shared_value_attention_backward.default, (grad_out, q, k, v, out, lse, lengths, 1.0))


@pytest.mark.parametrize("layer_specific", [False, True])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_multilayer_attention_fakes_report_the_real_strides(layout, layer_specific):
    q = [laid_out((2, 4, 6), layout, seed=i) for i in range(2)]  # 2 layers, 2 heads of size 3
    k = [laid_out((2, 5, 6), layout, seed=10 + i) for i in range(2)]
    v = [laid_out((2, 5, 6), layout, seed=20 + i) for i in range(2)]
    lengths = torch.tensor([5, 2])
    inputs = (q, k, v, lengths, 2, 0.5, layer_specific)
    assert_fake_matches_real(OPS.multilayer_attention.default, (*inputs, True))
    out, lse, probs = OPS.multilayer_attention(*inputs, True)
    grad_out = laid_out(tuple(out.shape), layout, seed=30)
    for saved in (None, probs):
        assert_fake_matches_real(OPS.multilayer_attention_backward.default,
                                 (grad_out, q, k, v, out, lse, saved, lengths, 2, 0.5, layer_specific))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_multihop_gate_fakes_report_the_real_strides(layout):
    query_proj, head_proj = laid_out((2, 3, 4, 5), layout, seed=1), laid_out((2, 3, 4, 5), layout, seed=2)
    value_proj = laid_out((2, 3, 4, 6), layout, seed=3)
    v_b = laid_out((5,), "contiguous", seed=4) if layout != "sliced" else laid_out((10,), "contiguous", seed=4)[::2]
    assert_fake_matches_real(OPS.multihop_gate.default, (query_proj, head_proj, value_proj, v_b))
    out, gate = OPS.multihop_gate(query_proj, head_proj, value_proj, v_b)
    grad_out, grad_gate = laid_out(tuple(out.shape), layout, seed=5), laid_out((2, 3, 4), "contiguous", seed=6)
    assert_fake_matches_real(OPS.multihop_gate_backward.default,
                             (grad_out, grad_gate, query_proj, head_proj, value_proj, v_b, gate))


@pytest.mark.parametrize("with_u_c", [False, True])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_multihop_second_hop_fakes_report_the_real_strides(layout, with_u_c):
    q, a = laid_out((2, 3, 4, 5), layout, seed=1), laid_out((2, 3, 4, 5), layout, seed=2)
    w_b = laid_out((5, 6), "contiguous", seed=3).t() if layout == "transposed" else laid_out((6, 5), layout, seed=3)
    u_b, u_c = laid_out((3, 6, 5), layout, seed=4), laid_out((3, 7, 5), layout, seed=5) if with_u_c else None
    v_b = laid_out((12,), "contiguous", seed=6)[::2] if layout == "sliced" else laid_out((6,), "contiguous", seed=6)
    assert_fake_matches_real(OPS.multihop_second_hop.default, (q, a, w_b, u_b, u_c, v_b))
    out, gate, hidden = OPS.multihop_second_hop(q, a, w_b, u_b, u_c, v_b)
    grad_out = laid_out(tuple(out.shape), layout, seed=7)
    assert_fake_matches_real(OPS.multihop_second_hop_backward.default,
                             (grad_out, gate.detach().clone(), q, a, w_b, u_b, u_c, v_b, gate, hidden))
