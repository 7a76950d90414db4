"""Multi-layer multi-head attention (SPEC section 3) on the fused attention operator, and the layer-aggregation
baselines."""

import copy
import math

import pytest
import torch

from mma_nmt.models import reorder_incremental_state
from mma_nmt.modules import (IterativeFeatureCombination, LinearFeatureCombination, MixedAttentionConfig,
                             MixedMultiheadAttention, MultiLayerAttentionConfig, MultiLayerMultiheadAttention,
                             SourceFeatureCollector, TransparentAttention)
from mma_nmt.ops import fused_attention
from mma_nmt.reference import multilayer_attention_reference

E, H = 24, 4
VARIANTS = ["M-00", "M-01", "M-10", "M-11"]


def _pair(variant, layers, seed=0):
    torch.manual_seed(seed)
    config = MultiLayerAttentionConfig.from_variant(variant, embed_dim=E, num_heads=H, num_layers=layers)
    fused = MultiLayerMultiheadAttention(config).double()
    reference = copy.deepcopy(fused)
    reference.config.implementation = "reference"
    return fused, reference


def _data(layers, batch=3, steps=5, src_len=7, seed=1):
    gen = torch.Generator().manual_seed(seed)
    query = torch.randn(batch, steps, E, generator=gen, dtype=torch.float64, requires_grad=True)
    features = [torch.randn(batch, src_len, E, generator=gen, dtype=torch.float64, requires_grad=True)
                for _ in range(layers)]
    return query, features


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("layers", [1, 2, 4])
@pytest.mark.parametrize("steps, src_len", [(5, 7), (1, 1), (1, 9), (6, 1)])
def test_fused_matches_reference(variant, layers, steps, src_len):
    fused, reference = _pair(variant, layers)
    query, features = _data(layers, steps=steps, src_len=src_len)
    lengths = torch.tensor([src_len, max(1, src_len // 2), 1])
    out, weights = fused(query, features, key_lengths=lengths, need_weights=True)
    ref_out, ref_weights = reference(query, features, key_lengths=lengths, need_weights=True)
    torch.testing.assert_close(out, ref_out)
    torch.testing.assert_close(weights, ref_weights)
    grad = torch.randn_like(out)
    inputs = [query, *features]
    got = torch.autograd.grad((out * grad).sum(), inputs + list(fused.parameters()))
    want = torch.autograd.grad((ref_out * grad).sum(), inputs + list(reference.parameters()))
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)


def test_reference_sums_logits_for_joint_weights():
    """Joint weights are softmax(sum_i q_i k_i^T / sqrt(D)), the same for every layer: check against a direct loop."""
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(3, 2, 2, 4, 5, generator=gen, dtype=torch.float64) for _ in range(3))  # n, B, H, L, D
    context, weights = multilayer_attention_reference(list(q), list(k), list(v), layer_specific=False,
                                                      sum_contexts=True)
    logits = sum(q[i] @ k[i].transpose(-1, -2) for i in range(3)) / math.sqrt(5)
    torch.testing.assert_close(weights, torch.softmax(logits, dim=-1))
    expected = sum(weights @ v[i] for i in range(3)).transpose(1, 2).reshape(2, 4, 10)
    torch.testing.assert_close(context, expected)


def test_concatenated_head_dims_give_joint_weights():
    """SPEC's identity: attention over [q_1 .. q_n] and [k_1 .. k_n] with scale 1/sqrt(D) is softmax(sum_i a_i)."""
    gen = torch.Generator().manual_seed(0)
    q, k = (torch.randn(4, 2, 3, 6, 8, generator=gen, dtype=torch.float64) for _ in range(2))  # n, B, H, L, D
    v = torch.randn(2, 3, 6, 8, generator=gen, dtype=torch.float64)
    out = fused_attention(torch.cat(list(q), -1), torch.cat(list(k), -1), v, scale=1 / math.sqrt(8),
                          return_probs=True)
    logits = sum(q[i] @ k[i].transpose(-1, -2) for i in range(4)) / math.sqrt(8)
    torch.testing.assert_close(out.probs, torch.softmax(logits, -1))


@pytest.mark.parametrize("variant", VARIANTS)
def test_one_layer_equals_standard_cross_attention(variant):
    mlmha, _ = _pair(variant, 1)
    standard = MixedMultiheadAttention(MixedAttentionConfig(embed_dim=E, num_heads=H, head_spec="G")).double()
    with torch.no_grad():
        for mine, theirs in [(mlmha.q_projs[0], standard.q_proj), (mlmha.k_projs[0], standard.k_proj),
                             (mlmha.v_projs[0], standard.v_proj), (mlmha.out_proj, standard.out_proj)]:
            theirs.weight.copy_(mine.weight)
            theirs.bias.copy_(mine.bias)
    query, (memory,) = _data(1)
    lengths = torch.tensor([7, 3, 1])
    out, weights = mlmha(query, [memory], key_lengths=lengths, need_weights=True)
    expected, expected_weights = standard(query, memory, key_lengths=lengths, need_weights=True)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(weights.reshape(expected_weights.shape), expected_weights)


@pytest.mark.parametrize("variant", VARIANTS)
def test_incremental_decoding_reuses_cached_keys(variant):
    fused, _ = _pair(variant, 3)
    query, features = _data(3, steps=4)
    lengths = torch.tensor([7, 5, 2])
    full, _ = fused(query, features, key_lengths=lengths)
    state = {}
    steps = [fused(query[:, t:t + 1], features, key_lengths=lengths, cache=state)[0] for t in range(4)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full)
    assert set(state) == {"k", "v"} and fused.has_cached_memory(state)
    # with a warm cache the features are not read again, so zeros give the same answer
    zeros = [torch.zeros_like(f) for f in features]
    again, _ = fused(query[:, :1], zeros, key_lengths=lengths, cache=state)
    torch.testing.assert_close(again, full[:, :1])
    order = torch.tensor([2, 0])
    reorder_incremental_state(state, order)  # the cache is batch-first: the generic reordering follows it
    reordered, _ = fused(query[order, :1], features, key_lengths=lengths[order], cache=state)
    torch.testing.assert_close(reordered, full[order, :1])


def test_collector_takes_top_layers_with_their_own_layer_norm():
    collector = SourceFeatureCollector(E, num_encoder_layers=6, num_collected=4).double()
    with torch.no_grad():
        for index, norm in enumerate(collector.norms):
            norm.weight.fill_(index + 1.0)
    outputs = [torch.randn(2, 5, E, dtype=torch.float64) for _ in range(6)]
    collected = collector(outputs)
    assert len(collected) == 4
    for index, f in enumerate(collected):
        expected = torch.nn.functional.layer_norm(outputs[2 + index], (E,)) * (index + 1.0)
        torch.testing.assert_close(f, expected)


def test_layer_masking_zeroes_one_encoder_layer():
    collector = SourceFeatureCollector(E, num_encoder_layers=6, num_collected=6).double()
    outputs = [torch.randn(2, 5, E, dtype=torch.float64) for _ in range(6)]
    mlmha, _ = _pair("M-00", 6)
    query = torch.randn(2, 3, E, dtype=torch.float64)
    unmasked, _ = mlmha(query, collector(outputs))
    collector.masked_layer = 1
    masked = collector(outputs)
    assert torch.equal(masked[0], torch.zeros_like(masked[0])) and masked[1].abs().sum() > 0
    assert not torch.allclose(mlmha(query, masked)[0], unmasked)
    collector.masked_layer = 7
    with pytest.raises(ValueError, match="masked_layer"):
        collector(outputs)


def test_linear_feature_combination_is_sum_of_per_layer_weights():
    module = LinearFeatureCombination(E, num_layers=3).double()
    outputs = [torch.randn(2, 4, E, dtype=torch.float64) for _ in range(3)]
    weights = module.combine.weight.split(E, dim=1)  # W_l
    expected = sum(h @ w.T for h, w in zip(outputs, weights)) + module.combine.bias
    torch.testing.assert_close(module(outputs), torch.nn.functional.layer_norm(expected, (E,)))


def test_iterative_feature_combination_merges_bottom_up():
    module = IterativeFeatureCombination(E, num_layers=3, ffn_dim=16).double()
    outputs = [torch.randn(2, 4, E, dtype=torch.float64) for _ in range(3)]
    x = outputs[0]
    for s in range(2):
        x = module.norms[s](module.ffns[s](torch.cat([x, outputs[s + 1]], -1)) + x + outputs[s + 1])
    torch.testing.assert_close(module(outputs), x)


def test_transparent_attention_gives_each_decoder_layer_a_convex_mix():
    module = TransparentAttention(num_encoder_layers=3, num_decoder_layers=2).double()
    with torch.no_grad():
        module.weights.copy_(torch.tensor([[0.0, 1.0], [1.0, 0.0], [2.0, 0.0], [0.0, -1.0]]))
    outputs = [torch.randn(2, 4, E, dtype=torch.float64) for _ in range(4)]
    mixed = module(outputs)
    mix = module.mixing_weights()
    torch.testing.assert_close(mix.sum(0), torch.ones(2, dtype=torch.float64))
    for j in range(2):
        torch.testing.assert_close(mixed[j], sum(mix[i, j] * outputs[i] for i in range(4)))
    with pytest.raises(ValueError, match="embeddings"):
        module(outputs[1:])


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="variant"):
        MultiLayerAttentionConfig.from_variant("M-22", embed_dim=E, num_heads=H)
    fused, _ = _pair("M-00", 2)
    query, features = _data(2)
    with pytest.raises(ValueError, match="features must hold"):
        fused(query, features[:1])
    with pytest.raises(ValueError, match=r"features\[1\]"):
        fused(query, [features[0], features[1][:, :3]])
    with pytest.raises(ValueError, match="query"):
        fused(query[0], features)
    with pytest.raises(ValueError, match="num_collected"):
        SourceFeatureCollector(E, num_encoder_layers=4, num_collected=5)
