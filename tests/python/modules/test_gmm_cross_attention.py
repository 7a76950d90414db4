"""GmmCrossAttention: every paper variant through the fused operator matches the same module on the plain-PyTorch
reference (forward and every parameter gradient), and incremental decoding matches the full forward."""

from __future__ import annotations

import copy

import pytest
import torch

from gmm_cases import Shape, make_inputs
from mma_nmt.models import reorder_incremental_state
from mma_nmt.modules import GmmAttentionConfig, GmmCrossAttention
from mma_nmt.ops import gmm_attention
from mma_nmt.reference import gmm_attention_reference

VARIANTS = {
    "default": {},
    "strict": {"normalization": "strict"},
    "unnormalised": {"normalization": "unnormalised"},
    "hard_coded": {"attention": "hard_coded"},
    "localness": {"attention": "localness"},
    "share_mean": {"share_mean": True},
    "share_variance": {"share_variance": True},
    "share_weight": {"share_weight": True},
    "average_gate": {"gate": "average"},
    "dot_only": {"attention": "dot"},
    "mixture_only": {"attention": "mixture"},
    "one_component": {"num_components": 1},
    "two_components": {"num_components": 2},
    "layer_not_listed": {"gmm_layers": (3, 4)},
}


def make_pair(variant: str, seed: int = 0) -> tuple[GmmCrossAttention, GmmCrossAttention]:
    torch.manual_seed(seed)
    config = GmmAttentionConfig(embed_dim=16, num_heads=2, **VARIANTS[variant])
    fused = GmmCrossAttention(config, layer_index=0).double()
    reference = copy.deepcopy(fused)
    reference.config = GmmAttentionConfig(**{**config.__dict__, "implementation": "reference"})
    return fused, reference


def make_batch(seed: int = 1, target_len: int = 5, source_len: int = 9):
    gen = torch.Generator().manual_seed(seed)
    query = torch.randn(2, target_len, 16, generator=gen, dtype=torch.float64)
    memory = torch.randn(2, source_len, 16, generator=gen, dtype=torch.float64)
    return query, memory, torch.tensor([source_len, 4])


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_module_variant_fused_matches_reference(variant):
    fused, reference = make_pair(variant)
    query, memory, lengths = make_batch()
    outputs = []
    for module in (fused, reference):
        out, weights = module(query, memory, key_lengths=lengths, need_weights=True)
        grad_out = torch.randn(out.shape, generator=torch.Generator().manual_seed(2), dtype=out.dtype)
        (out * grad_out).sum().backward()
        outputs.append((out, weights))
    (out_f, w_f), (out_r, w_r) = outputs
    torch.testing.assert_close(out_f, out_r)
    torch.testing.assert_close(w_f["gamma"], w_r["gamma"])
    for (name, p_f), p_r in zip(fused.named_parameters(), reference.parameters()):
        if p_r.grad is None:
            assert p_f.grad is None or torch.all(p_f.grad == 0), name
            continue
        torch.testing.assert_close(p_f.grad, p_r.grad, msg=lambda m: f"grad of {name}: {m}")


def test_layer_subset_builds_predictors_only_where_listed():
    config = GmmAttentionConfig(embed_dim=16, num_heads=2, gmm_layers=(1,))
    layers = [GmmCrossAttention(config, layer_index=i) for i in range(3)]
    assert [layer.enabled for layer in layers] == [False, True, False]
    baseline = sum(p.numel() for p in layers[0].parameters())
    assert sum(p.numel() for p in layers[1].parameters()) > baseline


@pytest.mark.parametrize("variant", ["default", "unnormalised", "hard_coded", "localness", "dot_only"])
def test_incremental_decoding_matches_full_forward(variant):
    fused, _ = make_pair(variant)
    query, memory, lengths = make_batch(target_len=4)
    full, _ = fused(query, memory, key_lengths=lengths)
    state: dict = {}
    steps = [fused(query[:, t:t + 1], memory if t == 0 else None, key_lengths=lengths, cache=state)[0]
             for t in range(query.shape[1])]
    torch.testing.assert_close(torch.cat(steps, dim=1), full)


def test_reorder_incremental_state_follows_the_beam():
    fused, _ = make_pair("unnormalised")
    query, memory, lengths = make_batch(target_len=2)
    state: dict = {}
    fused(query[:, :1], memory, key_lengths=lengths, cache=state)
    order = torch.tensor([1, 1])
    reorder_incremental_state(state, order)  # the cache is batch-first: the generic reordering follows it
    step, _ = fused(query[order, 1:2], None, cache=state)
    full, _ = fused(query[order], memory[order], key_lengths=lengths[order])
    torch.testing.assert_close(step, full[:, 1:2])


@pytest.mark.parametrize("normalization", ["approx", "synthesis"])
def test_normalization_takes_only_the_names_of_gmm_normalization(normalization):
    """One vocabulary (mma_nmt.ops.gmm_normalization): the module, the operator and the reference all refuse the names
    that modules and model variants had before."""
    inputs = {**make_inputs(Shape()), "normalization": normalization}
    with pytest.raises(ValueError, match="normalization"):
        GmmCrossAttention(GmmAttentionConfig(embed_dim=16, num_heads=2, normalization=normalization))
    with pytest.raises(ValueError, match="normalization"):
        gmm_attention(**inputs)
    with pytest.raises(ValueError, match="normalization"):
        gmm_attention_reference(**inputs)


def test_config_errors_name_the_field():
    with pytest.raises(ValueError, match="normalization"):
        GmmCrossAttention(GmmAttentionConfig(embed_dim=16, num_heads=2, normalization="exact"))
    with pytest.raises(ValueError, match="num_components"):
        GmmCrossAttention(GmmAttentionConfig(embed_dim=16, num_heads=2, num_components=0))
