"""``MultiHopSelfAttention`` (multi-hop attention, SPEC section 4) on the fused operators and on the plain-PyTorch
reference, with U_c folded into the output projection or not; its placement and parameter count."""

import copy

import pytest
import torch

from mma_nmt.modules import (
    MixedMultiheadAttention,
    MultiHopAttentionConfig,
    MultiHopPlacement,
    MultiHopSelfAttention,
    encoder_self_attention,
    multihop_attention,
    second_hop_parameter_count,
)

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
