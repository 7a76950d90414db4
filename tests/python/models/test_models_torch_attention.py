"""``implementation="torch"``: the Transformer built from ``nn.MultiheadAttention`` (the benchmarks' baseline) computes
the same function as the fused model given the same weights, decodes incrementally like its full forward, and refuses
attention kinds that have no ``nn.MultiheadAttention`` form."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from mma_nmt.models import build_model, reorder_incremental_state
from mma_nmt.modules import MixedMultiheadAttention
from nmt_fixtures import random_batch, tiny_transformer


def _copy_weights(fused: nn.Module, baseline: nn.Module) -> None:
    """Loads the fused model's weights into the torch model: the non-attention parameters by name, each
    ``MixedMultiheadAttention``'s q/k/v/out projections into the matching ``nn.MultiheadAttention`` (same order)."""
    sources = [m for m in fused.modules() if isinstance(m, MixedMultiheadAttention)]
    targets = [m for m in baseline.modules() if isinstance(m, nn.MultiheadAttention)]
    assert len(sources) == len(targets) > 0
    with torch.no_grad():
        for src, dst in zip(sources, targets):
            dst.in_proj_weight.copy_(torch.cat([src.q_proj.weight, src.k_proj.weight, src.v_proj.weight]))
            dst.in_proj_bias.copy_(torch.cat([src.q_proj.bias, src.k_proj.bias, src.v_proj.bias]))
            dst.out_proj.weight.copy_(src.out_proj.weight)
            dst.out_proj.bias.copy_(src.out_proj.bias)
        own = dict(baseline.named_parameters())
        for name, value in fused.named_parameters():
            if name in own:
                own[name].copy_(value)


def _pair(attention: str, head_spec: str = "GLFB"):
    models = []
    for implementation in ("fused", "torch"):
        config = tiny_transformer(implementation=implementation)
        config.encoder.attention, config.encoder.head_spec = attention, head_spec
        models.append(build_model(config).eval())
    _copy_weights(*models)
    return models


@pytest.mark.parametrize("attention,head_spec", [("standard", "G"), ("mma", "GLFB"), ("mma", "LFBG")])
def test_torch_implementation_matches_fused_model(attention, head_spec):
    fused, baseline = _pair(attention, head_spec)
    src, lengths, prev, _ = random_batch(batch=4, src_len=9, tgt_len=6)
    with torch.no_grad():
        expected = fused(src, lengths, prev)
        got = baseline(src, lengths, prev)
    torch.testing.assert_close(got, expected, atol=2e-5, rtol=1e-4)


def test_torch_implementation_trains():
    _, baseline = _pair("mma")
    baseline.train()
    src, lengths, prev, target = random_batch()
    logits = baseline(src, lengths, prev)
    nn.functional.cross_entropy(logits.flatten(0, 1), target.flatten()).backward()
    grads = [p.grad for p in baseline.parameters() if p.requires_grad]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)


def test_torch_incremental_decoding_with_reordering_matches_full_forward():
    _, baseline = _pair("mma")
    src, lengths, prev, _ = random_batch(batch=3, src_len=7, tgt_len=5)
    with torch.no_grad():
        full = baseline(src, lengths, prev)
        encoder_out, state = baseline.encode(src, lengths), {}
        steps = [baseline.decode(prev[:, : t + 1], encoder_out, state)[0] for t in range(prev.shape[1])]
        torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=2e-5, rtol=1e-4)
        order = torch.tensor([2, 0, 0])  # beam search: rows swap and repeat; the cache follows
        encoder_out, state = baseline.encode(src, lengths), {}
        for t in range(3):
            baseline.decode(prev[:, : t + 1], encoder_out, state)
        reorder_incremental_state(state, order)
        step, _ = baseline.decode(prev.index_select(0, order)[:, :4], encoder_out.index_select(order), state)
    torch.testing.assert_close(step, full.index_select(0, order)[:, 3:4], atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("place,kind", [("decoder.cross_attention", "gmm"), ("decoder.cross_attention", "mlmha"),
                                        ("encoder.attention", "multihop")])
def test_torch_implementation_rejects_kinds_without_multihead_attention_form(place, kind):
    config = tiny_transformer(implementation="torch")
    part, field = place.split(".")
    setattr(getattr(config, part), field, kind)
    with pytest.raises(ValueError, match=f"nn.MultiheadAttention.*{kind}"):
        build_model(config)
