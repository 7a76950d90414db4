"""The attention kinds wired through the factory's adapters: multi-hop encoder self-attention, MLMHA and GMM
cross-attention, the layer-aggregation baselines, the fused multi-head Luong attention of the LSTM. For each: a tiny
model trains (finite loss and gradients), incremental decoding (with beam reordering) equals the full forward, fused
equals reference."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from mma_nmt.models import build_model, preset, reorder_incremental_state
from mma_nmt.models.attention_adapters import (
    GmmCrossAttentionAdapter,
    MultiHopEncoderSelfAttention,
    MultiLayerCrossAttention,
)
from mma_nmt.modules import LuongMultiheadAttention, MixedMultiheadAttention
from mma_nmt.training.loss import label_smoothed_cross_entropy
from nmt_fixtures import random_batch, tiny_transformer


def _transformer(kind: str, **decoder_or_encoder):
    config = tiny_transformer(d_model=16, ffn_dim=32)  # 2 + 2 layers, 4 heads of size 4
    if kind == "multihop":
        config.encoder.attention = "multihop"
    else:
        config.decoder.cross_attention = kind
    for name, value in decoder_or_encoder.items():
        place, field = name.split("__")
        setattr(getattr(config, place), field, value)
    return config


CASES = {
    "multihop[1]": lambda: _transformer("multihop", encoder__multihop_layers=[1]),
    "multihop[0,1]/hidden3": lambda: _transformer("multihop", encoder__multihop_layers=[0, 1],
                                                  encoder__multihop_hidden=3),
    **{f"mlmha/{v}/n2": (lambda v=v: _transformer("mlmha", decoder__mlmha_n=2, decoder__mlmha_variant=v))
       for v in ("M-00", "M-01", "M-10", "M-11")},
    "gmm/approximate/[1]": lambda: _transformer("gmm", decoder__gmm_layers=[1]),
    "gmm/unnormalised/[0]": lambda: _transformer("gmm", decoder__gmm_layers=[0],
                                                 decoder__gmm_variant="unnormalised"),
    "gmm/hard/all": lambda: _transformer("gmm", decoder__gmm_variant="hard"),
    **{f"aggregation/{kind}": (lambda kind=kind: _transformer("standard", encoder__layer_aggregation=kind))
       for kind in ("linear", "iterative", "transparent")},
    "lstm/fused-luong/h2": lambda: preset("lstm_tiny", src_vocab_size=37, tgt_vocab_size=41, dropout=0.0, heads=2,
                                          embed_dim=16, hidden_size=16, softmax_dim=16, feed_dim=8,
                                          implementation="fused"),
}


def _build(name: str, seed: int = 0, **overrides):
    config = CASES[name]()
    if overrides:
        config = replace(config, **overrides)
    torch.manual_seed(seed)
    return build_model(config)


def _loss_and_grads(model, batch):
    src, lengths, prev, tgt = batch
    model.zero_grad()
    loss, _ = label_smoothed_cross_entropy(model(src, lengths, prev), tgt, epsilon=0.1, ignore_index=0)
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_each_kind_is_built_where_the_config_puts_it():
    enc = _build("multihop[1]").encoder_layers
    assert isinstance(enc[0].self_attn, MixedMultiheadAttention) and isinstance(enc[1].self_attn,
                                                                                MultiHopEncoderSelfAttention)
    mlmha = _build("mlmha/M-10/n2").decoder_layers
    assert all(isinstance(layer.cross_attn, MultiLayerCrossAttention) for layer in mlmha)
    dec = _build("gmm/approximate/[1]").decoder_layers
    assert not isinstance(dec[0].cross_attn, GmmCrossAttentionAdapter)
    assert isinstance(dec[1].cross_attn, GmmCrossAttentionAdapter) and dec[1].cross_attn.attn.enabled
    fused = _build("lstm/fused-luong/h2").decoder.attention
    assert isinstance(fused, LuongMultiheadAttention) and fused.config.implementation == "fused"
    reference = _build("lstm/fused-luong/h2", implementation="reference").decoder.attention
    assert isinstance(reference, LuongMultiheadAttention) and reference.config.implementation == "reference"


@pytest.mark.parametrize("name", list(CASES))
def test_builds_and_trains_with_finite_gradients(name):
    model = _build(name)
    loss, grads = _loss_and_grads(model, random_batch())
    assert torch.isfinite(loss) and loss > 0
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert all(torch.isfinite(g).all() for g in grads.values())
    # every attention parameter of the new kinds gets a gradient (the module is really on the path)
    missing = {n for n in trainable - grads.keys() if "embed" not in n}
    assert not missing, missing
    assert any(float(g.abs().sum()) > 0 for n, g in grads.items() if ".attn." in n or "attention" in n)


@pytest.mark.parametrize("name", list(CASES))
def test_incremental_decoding_and_beam_reordering_equal_full_forward(name):
    model = _build(name, seed=1).eval()
    src, lengths, prev, _ = random_batch(batch=4)
    with torch.no_grad():
        full = model(src, lengths, prev)
        encoder_out, state = model.encode(src, lengths), {}
        steps = [model.decode(prev[:, : t + 1], encoder_out, state)[0] for t in range(prev.shape[1])]
        torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-4, atol=1e-5)
        # beam search: reorder the rows of the state after 3 steps, continue with one more step
        order = torch.tensor([2, 0, 0, 3])
        encoder_out, state = model.encode(src, lengths), {}
        for t in range(3):
            model.decode(prev[:, : t + 1], encoder_out, state)
        reorder_incremental_state(state, order)
        prev_r = prev.index_select(0, order)
        step, _ = model.decode(prev_r[:, :4], encoder_out.index_select(order), state)
        expected = full.index_select(0, order)[:, 3:4]
        torch.testing.assert_close(step, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", list(CASES))
def test_fused_and_reference_give_same_loss_and_gradients(name):
    reference = _build(name, seed=2, implementation="reference").double()
    fused = _build(name, seed=3, implementation="fused").double()
    fused.load_state_dict(reference.state_dict())  # the same parameters
    assert fused.state_dict().keys() == reference.state_dict().keys()
    batch = random_batch()
    loss_r, grads_r = _loss_and_grads(reference, batch)
    loss_f, grads_f = _loss_and_grads(fused, batch)
    torch.testing.assert_close(loss_f, loss_r, rtol=1e-10, atol=1e-10)
    assert grads_f.keys() == grads_r.keys() and len(grads_f) > 10
    for n in grads_f:
        torch.testing.assert_close(grads_f[n], grads_r[n], rtol=1e-8, atol=1e-10, msg=n)


@pytest.mark.parametrize("name", ["multihop[1]", "mlmha/M-01/n2", "mlmha/M-10/n2", "gmm/approximate/[1]"])
@pytest.mark.parametrize("implementation", ["fused", "reference"])
def test_need_weights_gives_per_head_weights(name, implementation):
    model = _build(name, implementation=implementation).eval()
    src, lengths, prev, _ = random_batch()
    with torch.no_grad():
        encoder_out = model.encode(src, lengths, need_weights=True)
        _, weights = model.decode(prev, encoder_out, need_weights=True)
    batch, heads, s, t = src.shape[0], 4, src.shape[1], prev.shape[1]
    assert all(w.shape == (batch, heads, s, s) for w in encoder_out.extra.values()) and len(encoder_out.extra) == 2
    assert len(weights) == 2 and all(w.shape == (batch, heads, t, s) for w in weights)
    for w in weights:  # non-negative, zero on padding; rows are distributions (GMM's approximate normalisation aside)
        assert float(w.min()) >= 0.0 and float(w[2, :, :, int(lengths[2]):].abs().sum()) == 0.0
        if not name.startswith("gmm"):
            torch.testing.assert_close(w.sum(-1), torch.ones(batch, heads, t, dtype=w.dtype), rtol=1e-4, atol=1e-4)


def test_unknown_gmm_variant_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown decoder.gmm_variant 'nope'"):
        build_model(_transformer("gmm", decoder__gmm_variant="nope"))


@pytest.mark.parametrize("stored,variant", [("approx", "approximate"), ("synthesis", "unnormalised")])
def test_gmm_variant_names_of_an_earlier_version_still_load(stored, variant):
    """Stored configs (checkpoints, experiment records) of the version before the normalisation variants took the names
    of their normalisations say "approx" or "synthesis": they load as today's names, with the same module."""
    from mma_nmt.models.attention_adapters import gmm_attention_config
    from mma_nmt.training.config import model_config_from_dict

    config = model_config_from_dict({"decoder": {"cross_attention": "gmm", "gmm_variant": stored}})
    assert config.decoder.gmm_variant == variant
    assert gmm_attention_config(config).normalization == variant


def test_mlmha_preset_reads_all_encoder_layers_by_default():
    config = preset("transformer_mlmha_iwslt_m11", src_vocab_size=37, tgt_vocab_size=41)
    assert (config.d_model, config.ffn_dim, config.heads, config.encoder.layers, config.decoder.layers) == \
        (256, 1024, 4, 4, 4)
    assert config.decoder.cross_attention == "mlmha"
    layer = build_model(replace(config, decoder=replace(config.decoder, layers=1))).decoder_layers[0]
    assert layer.cross_attn.attn.config.num_layers == 4
    assert layer.cross_attn.attn.config.layer_specific and layer.cross_attn.attn.config.sum_contexts


def test_multihop_and_gmm_presets():
    multihop = preset("transformer_multihop_base")
    assert (multihop.encoder.attention, multihop.encoder.multihop_layers, multihop.d_model) == ("multihop", [3], 512)
    gmm = preset("transformer_gmm_iwslt_small")
    assert (gmm.decoder.cross_attention, gmm.decoder.gmm_variant, gmm.decoder.gmm_components) == \
        ("gmm", "approximate", 4)


def test_gmm_module_is_reordered_by_the_generic_function():
    """The GMM state (keys, values, lengths, previous means) is batch-first: the generic reordering covers it all."""
    state = {"k": torch.arange(3.0).view(3, 1), "previous_mu": torch.arange(3.0).view(3, 1), "step": 2}
    reorder_incremental_state(state, torch.tensor([1, 1, 0]))
    assert state["previous_mu"].flatten().tolist() == [1.0, 1.0, 0.0] and state["step"] == 2


@pytest.mark.parametrize("variant,layer_specific,sum_contexts",
                         [("M-00", False, False), ("M-01", False, True), ("M-10", True, False), ("M-11", True, True)])
def test_mlmha_variant_and_n_reach_the_module(variant, layer_specific, sum_contexts):
    for layer in _build(f"mlmha/{variant}/n2").decoder_layers:
        c = layer.cross_attn.attn.config
        assert (c.num_layers, c.layer_specific, c.sum_contexts) == (2, layer_specific, sum_contexts)
        assert layer.cross_attn.attn.out_proj.in_features == (16 if sum_contexts else 32)


def test_gmm_variant_and_components_reach_the_module():
    config = _transformer("gmm", decoder__gmm_variant="strict", decoder__gmm_components=3)
    attn = build_model(config).decoder_layers[0].cross_attn.attn
    assert (attn.config.normalization, attn.config.num_components, attn.predictor.mean.out.out_features) == \
        ("strict", 3, 3)
    hard = build_model(_transformer("gmm", decoder__gmm_variant="hard")).decoder_layers[0].cross_attn.attn
    assert hard.config.attention == "hard_coded"


@pytest.mark.parametrize("name", ["multihop[1]", "mlmha/M-10/n2", "gmm/unnormalised/[0]", "gmm/hard/all",
                                  "lstm/fused-luong/h2"])
def test_beam_search_runs_and_beam_one_equals_greedy(name):
    from mma_nmt.decoding.beam import beam_search
    from mma_nmt.decoding.search import SearchConfig, greedy_search

    model = _build(name, seed=4).eval()
    src, lengths, _, _ = random_batch(batch=3)
    config = SearchConfig(beam_size=1, max_len_a=1.0, max_len_b=4, length_penalty="avg")
    assert [h.tokens for h in greedy_search(model, src, lengths, config)] == \
        [hyps[0].tokens for hyps in beam_search(model, src, lengths, config)]
    assert all(hyps for hyps in beam_search(model, src, lengths, replace(config, beam_size=3)))


@pytest.mark.parametrize("name", ["mlmha/M-10/n2", "aggregation/linear", "aggregation/transparent"])
def test_pre_norm_normalises_every_layer_the_decoder_reads(name):
    """Post-norm hands the MLMHA attention and the aggregations normalised layer outputs; under pre-norm a layer's own
    output is the residual stream, so each layer below the top gets its own LayerNorm (the top one: encoder_norm)."""
    model = _build(name, pre_norm=True).eval()
    src, lengths, prev, _ = random_batch()
    with torch.no_grad():
        states = model.encode(src, lengths).layer_states
        x, raw = model.src_embed(src), []
        for layer in model.encoder_layers:
            x, _ = layer(x, lengths)
            raw.append(x)
    assert len(model.lower_layer_norms) == len(raw) - 1
    for state, norm, layer_output in zip(states[:-1], model.lower_layer_norms, raw[:-1]):
        torch.testing.assert_close(state, norm(layer_output))
        torch.testing.assert_close(state.mean(-1), torch.zeros_like(state.mean(-1)), atol=1e-5, rtol=0)
    torch.testing.assert_close(states[-1], model.encoder_norm(raw[-1]))
    encoder_out, cache = model.encode(src, lengths), {}  # incremental decoding still equals the full forward
    steps = [model.decode(prev[:, : t + 1], encoder_out, cache)[0] for t in range(prev.shape[1])]
    torch.testing.assert_close(torch.cat(steps, dim=1), model(src, lengths, prev), rtol=1e-4, atol=1e-5)


def test_pre_norm_adds_no_layer_norms_where_the_decoder_reads_only_the_top_layer():
    plain = _build("gmm/approximate/[1]", pre_norm=True)
    post = _build("mlmha/M-10/n2")
    assert plain.lower_layer_norms is None and post.lower_layer_norms is None
