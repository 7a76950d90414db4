"""mma_nmt::multihop_gate (second hop of multi-hop attention, SPEC section 4) and MultiHopSelfAttention."""

import copy

import pytest
import torch

from mma_nmt.modules import (MixedMultiheadAttention, MultiHopAttentionConfig, MultiHopPlacement, MultiHopSelfAttention,
                             encoder_self_attention, second_hop_parameter_count)
from mma_nmt.modules import multihop_attention
from mma_nmt.ops import multihop_gate
from mma_nmt.reference import head_gate_reference, second_hop_reference

SHAPES = [  # (B, H, T, Db, Dc)
    (2, 4, 5, 8, 8),
    (3, 5, 7, 13, 11),  # odd sizes, Db != Dc
    (1, 1, 1, 1, 1),  # one head: the gate is 1
    (2, 8, 1, 64, 64),  # paper head size, one position
    (1, 3, 67, 17, 33),  # more positions than a kernel block
]


def _inputs(shape, dtype, seed=0):
    batch, heads, length, hop_dim, value_dim = shape
    gen = torch.Generator().manual_seed(seed)
    make = lambda *s: torch.randn(*s, generator=gen, dtype=dtype).requires_grad_()  # noqa: E731
    return (make(batch, heads, length, hop_dim), make(batch, heads, length, hop_dim),
            make(batch, heads, length, value_dim), make(hop_dim))


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_head_gate_matches_reference(shape, dtype):
    inputs = _inputs(shape, dtype)
    out, gate = multihop_gate(*inputs)
    ref_out, ref_gate = head_gate_reference(*inputs)
    tol = dict(atol=1e-5, rtol=1e-4) if dtype == torch.float32 else dict(atol=1e-12, rtol=1e-10)
    torch.testing.assert_close(out, ref_out, **tol)
    torch.testing.assert_close(gate, ref_gate, **tol)
    grad_out, grad_gate = torch.randn_like(out), torch.randn_like(gate)
    grads = torch.autograd.grad((out * grad_out).sum() + (gate * grad_gate).sum(), inputs)
    ref_grads = torch.autograd.grad((ref_out * grad_out).sum() + (ref_gate * grad_gate).sum(), inputs)
    for name, got, want in zip(["query_proj", "head_proj", "value_proj", "v_b"], grads, ref_grads):
        torch.testing.assert_close(got, want, **tol, msg=lambda m: f"grad of {name}: {m}")


@pytest.mark.parametrize("isa", ["default", "avx2", "avx512"])
def test_head_gate_every_cpu_build_matches_reference(isa, monkeypatch):
    monkeypatch.setenv("MMA_NMT_CPU_ISA", isa)
    inputs = _inputs((2, 3, 9, 19, 21), torch.float32)
    out, gate = multihop_gate(*inputs)
    ref_out, ref_gate = head_gate_reference(*inputs)
    torch.testing.assert_close(out, ref_out, atol=1e-5, rtol=1e-4)
    grads = torch.autograd.grad(out.square().sum(), inputs)
    ref_grads = torch.autograd.grad(ref_out.square().sum(), inputs)
    for got, want in zip(grads, ref_grads):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_head_gate_reads_strided_slices_in_place():
    """Slices of one (B, H, T, Db + Dc) projection and a transposed (B, T, H, Db) one, as the module passes them."""
    gen = torch.Generator().manual_seed(5)
    both = torch.randn(3, 4, 6, 7 + 5, generator=gen, dtype=torch.float64, requires_grad=True)
    natural = torch.randn(3, 6, 4, 7, generator=gen, dtype=torch.float64, requires_grad=True)
    v_b = torch.randn(7, generator=gen, dtype=torch.float64, requires_grad=True)
    args = (natural.transpose(1, 2), both[..., :7], both[..., 7:], v_b)
    assert not any(a.is_contiguous() for a in args[:3])
    out, gate = multihop_gate(*args)
    ref_out, ref_gate = head_gate_reference(*args)
    torch.testing.assert_close(out, ref_out)
    torch.testing.assert_close(gate, ref_gate)
    got = torch.autograd.grad(out.square().sum() + gate.sum(), (both, natural, v_b))
    want = torch.autograd.grad(ref_out.square().sum() + ref_gate.sum(), (both, natural, v_b))
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)


def test_head_gate_weights_sum_to_one_over_heads():
    _, gate = multihop_gate(*_inputs((3, 8, 6, 16, 16), torch.float64))
    assert (gate > 0).all()
    torch.testing.assert_close(gate.sum(dim=1), torch.ones(3, 6, dtype=torch.float64))


def test_head_gate_only_gradient_flows_through_gate():
    inputs = _inputs((2, 3, 4, 5, 6), torch.float64)
    _, gate = multihop_gate(*inputs)
    _, ref_gate = head_gate_reference(*inputs)
    weights = torch.randn_like(gate)
    got = torch.autograd.grad((gate * weights).sum(), inputs[:2])
    want = torch.autograd.grad((ref_gate * weights).sum(), inputs[:2])
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_head_gate_gradcheck(seed):
    inputs = _inputs((2, 3, 2, 3, 4), torch.float64, seed=seed)
    assert torch.autograd.gradcheck(lambda *x: tuple(multihop_gate(*x)), inputs)


def test_head_gate_opcheck():
    torch.library.opcheck(torch.ops.mma_nmt.multihop_gate.default, _inputs((2, 3, 4, 5, 6), torch.float32))
    torch.library.opcheck(torch.ops.mma_nmt.multihop_gate.default, _inputs((1, 1, 1, 1, 1), torch.float64))


def test_head_gate_empty_input():
    out, gate = multihop_gate(*_inputs((0, 3, 4, 5, 6), torch.float32))
    assert out.shape == (0, 3, 4, 6) and gate.shape == (0, 3, 4)


@pytest.mark.parametrize("change, match", [
    (lambda x: (x[0][0], *x[1:]), "query_proj must have shape"),
    (lambda x: (x[0], x[1][..., :-1], *x[2:]), "head_proj must have shape"),
    (lambda x: (x[0], x[1], x[2][:, :-1], x[3]), "value_proj must have shape"),
    (lambda x: (*x[:3], x[3][:-1]), "v_b must have shape"),
    (lambda x: (x[0], x[1].double(), *x[2:]), "head_proj must have dtype"),
    (lambda x: tuple(t.half() for t in x), "float32 or float64"),
    (lambda x: tuple(t.long() for t in x), "floating-point"),
])
def test_head_gate_rejects_bad_input(change, match):
    inputs = tuple(t.detach() for t in _inputs((2, 3, 4, 5, 6), torch.float32))
    with pytest.raises((ValueError, TypeError, RuntimeError), match=match):
        multihop_gate(*change(inputs))


def test_head_gate_cpu_out_is_position_major_and_gradients_follow_inputs():
    """out is (B, T, H, ·) in memory behind a (B, H, T, ·) view (merging the heads is a view); the projections'
    gradients are laid out like the projections (autograd passes them on without copies); backward reads a strided
    grad_out in place."""
    inputs = _inputs((2, 3, 5, 4, 6), torch.float64)
    out, gate = multihop_gate(*inputs)
    assert out.transpose(1, 2).is_contiguous() and gate.is_contiguous()
    grad_out = torch.randn(2, 5, 3, 6, dtype=torch.float64).transpose(1, 2)  # as merge_heads' backward hands it over
    grads = torch.autograd.grad(out, inputs, grad_out)
    ref_grads = torch.autograd.grad(head_gate_reference(*inputs)[0], inputs, grad_out)
    for got, want in zip(grads, ref_grads):
        torch.testing.assert_close(got, want)
    backward = torch.ops.mma_nmt.multihop_gate_backward
    grad_pre, grad_value, _ = backward(grad_out, None, *(t.detach() for t in inputs), gate.detach())
    assert grad_pre.is_contiguous() and grad_value.is_contiguous()  # like the contiguous inputs
    natural = [t.detach().transpose(1, 2).contiguous().transpose(1, 2) for t in inputs[:3]]  # (B, T, H, ·) buffers
    grad_pre, grad_value, _ = backward(grad_out, None, *natural, inputs[3].detach(), gate.detach())
    assert grad_pre.transpose(1, 2).is_contiguous() and grad_value.transpose(1, 2).is_contiguous()
    permuted = torch.randn(4, 2, 3, 5, dtype=torch.float64).permute(1, 2, 3, 0)  # last dimension outermost
    grad_pre, _, _ = backward(grad_out, None, permuted, permuted, natural[2], inputs[3].detach(), gate.detach())
    assert grad_pre.transpose(1, 2).is_contiguous()  # position-major


@pytest.mark.parametrize("kind", ["expanded", "every_other"])
def test_head_gate_backward_reads_grad_out_with_any_last_stride(kind):
    """A loss like out.sum() hands backward an expanded (stride-0) grad_out; the CPU kernel gathers such rows itself."""
    inputs = _inputs((1, 3, 67, 17, 33), torch.float64)
    gen = torch.Generator().manual_seed(9)
    if kind == "expanded":
        grad_out = torch.randn((), generator=gen, dtype=torch.float64).expand(1, 3, 67, 33)
    else:
        grad_out = torch.randn(1, 3, 67, 66, generator=gen, dtype=torch.float64)[..., ::2]
    assert grad_out.stride(-1) != 1
    out, _ = multihop_gate(*inputs)
    grads = torch.autograd.grad(out, inputs, grad_out)
    ref_grads = torch.autograd.grad(head_gate_reference(*inputs)[0], inputs, grad_out)
    for got, want in zip(grads, ref_grads):
        torch.testing.assert_close(got, want)


def test_second_hop_reference_follows_spec_per_head():
    gen = torch.Generator().manual_seed(3)
    batch, heads, length, dim, hop = 2, 3, 4, 5, 6
    q, a = torch.randn(2, batch, heads, length, dim, generator=gen, dtype=torch.float64)
    w_b = torch.randn(hop, dim, generator=gen, dtype=torch.float64)
    v_b = torch.randn(hop, generator=gen, dtype=torch.float64)
    u_b = torch.randn(heads, hop, dim, generator=gen, dtype=torch.float64)
    u_c = torch.randn(heads, dim, dim, generator=gen, dtype=torch.float64)
    out, beta = second_hop_reference(q, a, w_b, v_b, u_b, u_c)
    e = torch.stack([torch.tanh(q[:, h] @ w_b.T + a[:, h] @ u_b[h].T) @ v_b for h in range(heads)], dim=1)
    expected_beta = torch.exp(e) / torch.exp(e).sum(dim=1, keepdim=True)
    torch.testing.assert_close(beta, expected_beta)
    for h in range(heads):
        torch.testing.assert_close(out[:, h], expected_beta[:, h, :, None] * (a[:, h] @ u_c[h].T))


FOLDED_OUTPUT_WEIGHT = multihop_attention.folded_output_weight


def _module_pair(hop_dim=None):
    torch.manual_seed(0)
    fused = MultiHopSelfAttention(MultiHopAttentionConfig(embed_dim=24, num_heads=4, hop_dim=hop_dim)).double()
    reference = copy.deepcopy(fused)
    reference.config.implementation = "reference"
    return fused, reference


@pytest.mark.parametrize("hop_dim", [None, 3, 11])
def test_multihop_module_matches_reference(hop_dim):
    fused, reference = _module_pair(hop_dim)
    x = torch.randn(3, 7, 24, dtype=torch.float64)
    lengths = torch.tensor([7, 4, 1])
    out, weights = fused(x, key_lengths=lengths, need_weights=True, need_head_gate=True)
    ref_out, ref_weights = reference(x, key_lengths=lengths, need_weights=True, need_head_gate=True)
    torch.testing.assert_close(out, ref_out)
    torch.testing.assert_close(weights.attention, ref_weights.attention)
    torch.testing.assert_close(weights.head_gate, ref_weights.head_gate)
    torch.testing.assert_close(weights.head_gate.sum(-1), torch.ones(3, 7, dtype=torch.float64))
    out.square().sum().backward()
    ref_out.square().sum().backward()
    for (name, p), q in zip(fused.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, msg=lambda m: f"grad of {name}: {m}")


@pytest.mark.parametrize("length", [7, 9])  # B*T = 21 <= E = 24: unfolded; 27 > 24: U_c folded into out_proj
def test_multihop_module_matches_reference_folded_or_not(length, monkeypatch):
    fused, reference = _module_pair(hop_dim=5)
    folds = []
    monkeypatch.setattr(multihop_attention, "folded_output_weight",
                        lambda *args: folds.append(1) or FOLDED_OUTPUT_WEIGHT(*args))
    x = torch.randn(3, length, 24, dtype=torch.float64)
    out, weights = fused(x, need_head_gate=True)
    ref_out, ref_weights = reference(x, need_head_gate=True)
    assert len(folds) == (length == 9)
    torch.testing.assert_close(out, ref_out)
    torch.testing.assert_close(weights.head_gate, ref_weights.head_gate)
    grad_out = torch.randn_like(out)
    out.backward(grad_out)
    ref_out.backward(grad_out)
    for (name, p), q in zip(fused.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, msg=lambda m: f"grad of {name}: {m}")


def test_folded_output_weight_is_output_weight_times_u_c_per_head():
    gen = torch.Generator().manual_seed(4)
    embed, heads, dim = 6, 3, 2
    w_o = torch.randn(embed, heads * dim, generator=gen, dtype=torch.float64)
    u_c = torch.randn(heads, dim, dim, generator=gen, dtype=torch.float64)
    folded = FOLDED_OUTPUT_WEIGHT(w_o, u_c)
    for h in range(heads):
        block = slice(h * dim, (h + 1) * dim)
        torch.testing.assert_close(folded[:, block], w_o[:, block] @ u_c[h])


def test_multihop_module_length_one_and_no_weights():
    fused, _ = _module_pair()
    out, weights = fused(torch.randn(2, 1, 24, dtype=torch.float64))
    assert out.shape == (2, 1, 24) and weights is None


def test_default_placement_is_layer_four_of_six():
    placement = MultiHopPlacement()
    config = MultiHopAttentionConfig(embed_dim=16, num_heads=4)
    kinds = [type(encoder_self_attention(config, placement, layer)) for layer in range(1, 7)]
    assert kinds == [MixedMultiheadAttention] * 3 + [MultiHopSelfAttention] + [MixedMultiheadAttention] * 2
    with pytest.raises(ValueError, match="second_hop_layers"):
        MultiHopPlacement(num_layers=6, second_hop_layers=(7,))


def test_second_hop_parameter_count_matches_module():
    config = MultiHopAttentionConfig(embed_dim=512, num_heads=8)
    module = MultiHopSelfAttention(config)
    second_hop = sum(p.numel() for p in (module.w_b, module.v_b, module.u_b, module.u_c))
    assert second_hop == second_hop_parameter_count(config) == 69_696
