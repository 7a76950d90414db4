"""Record mode (mma_nmt.models.recording) and force-decoding (mma_nmt.evaluation.force_decode): every model kind hands
out the weights the analyses need, with the right shapes, rows that are distributions over the real keys, the head
kinds' masks, GMM components consistent with the weights they produce, and the model left as it was."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from mma_nmt.evaluation.force_decode import alignment_attention_fn, encode_words, force_decode, force_decode_sentences
from mma_nmt.models import build_model, preset
from mma_nmt.models.layer_masking import masked_encoder_layer
from mma_nmt.models.recording import SWITCHABLE, collect_attention, record_attention
from mma_nmt.reference.gmm_attention import mixture_weights
from nmt_fixtures import tiny_data  # noqa: F401  (fixture)
from nmt_fixtures import tiny_transformer


def _transformer(**places):
    config = tiny_transformer(d_model=16, ffn_dim=32)  # 2 + 2 layers, 4 heads of size 4
    for name, value in places.items():
        place, field = name.split("__")
        setattr(getattr(config, place), field, value)
    return config


def _lstm(implementation: str):
    return preset("lstm_tiny", src_vocab_size=37, tgt_vocab_size=41, dropout=0.0, heads=2, embed_dim=16, hidden_size=16,
                  softmax_dim=16, feed_dim=8, implementation=implementation)


KINDS = {
    "standard": lambda: _transformer(),
    "mma/GLFB": lambda: _transformer(encoder__attention="mma", encoder__head_spec="GLFB", encoder__window=1),
    "multihop[1]": lambda: _transformer(encoder__attention="multihop", encoder__multihop_layers=[1]),
    "mlmha/M-11": lambda: _transformer(decoder__cross_attention="mlmha", decoder__mlmha_variant="M-11"),
    "mlmha/M-01/n1": lambda: _transformer(decoder__cross_attention="mlmha", decoder__mlmha_variant="M-01",
                                          decoder__mlmha_n=1),
    "gmm/approximate": lambda: _transformer(decoder__cross_attention="gmm", decoder__gmm_components=3),
    "gmm/strict/[1]": lambda: _transformer(decoder__cross_attention="gmm", decoder__gmm_variant="strict",
                                           decoder__gmm_layers=[1]),
    "lstm/reference": lambda: _lstm("reference"),
    "lstm/fused": lambda: _lstm("fused"),
}


def _model(kind: str, dtype=torch.float64):
    torch.manual_seed(0)
    return build_model(KINDS[kind]()).to(dtype).eval()


def _pairs(seed: int = 0):
    """Three sentence pairs of different source and target lengths (so the batch is padded on both sides)."""
    g = torch.Generator().manual_seed(seed)
    sources = [torch.randint(4, 37, (n,), generator=g) for n in (7, 3, 5)]
    targets = [torch.randint(4, 41, (n,), generator=g) for n in (4, 6, 1)]
    return sources, targets


def _assert_distributions(weights: torch.Tensor, src_lengths, tgt_lengths, *, causal: bool = False):
    """weights (B, H, T, S): each real row sums to 1 over the real keys and puts nothing on padding (or the future)."""
    for b in range(weights.shape[0]):
        t, s = int(tgt_lengths[b]), int(src_lengths[b])
        rows = weights[b, :, :t]
        torch.testing.assert_close(rows[..., :s].sum(-1), torch.ones_like(rows[..., 0]))
        assert torch.all(rows[..., s:] == 0)  # padding keys
        if causal:
            assert torch.triu(rows[..., :s], diagonal=1).abs().max().item() == 0


@pytest.mark.parametrize("kind", list(KINDS))
def test_every_model_kind_hands_out_weights_with_shapes_and_rows_that_sum_to_one(kind):
    model = _model(kind)
    sources, targets = _pairs()
    record = force_decode(model, sources, targets)
    B, S, T = 3, 7, 7  # T = longest target + BOS
    assert record.src_lengths.tolist() == [7, 3, 5] and record.tgt_lengths.tolist() == [5, 7, 2]
    if kind.startswith("lstm"):
        assert len(record.cross) == 1 and record.encoder_self == [] and record.decoder_self == []
        assert record.cross[0].shape == (B, 2, T, S)
    else:
        heads = model.config.heads
        assert len(record.encoder_self) == 2 and len(record.decoder_self) == 2 and len(record.cross) == 2
        for w in record.encoder_self:
            assert w.shape == (B, heads, S, S)
            _assert_distributions(w, record.src_lengths, record.src_lengths)
        for w in record.decoder_self:
            assert w.shape == (B, heads, T, T)
            _assert_distributions(w, record.tgt_lengths, record.tgt_lengths, causal=True)
    for w in record.cross:
        if not kind.startswith("gmm"):  # GMM rows (gamma) mix in an approximately normalised mixture
            _assert_distributions(w, record.src_lengths, record.tgt_lengths)


def test_mixed_heads_are_labelled_and_keep_to_their_masks():
    record = force_decode(_model("mma/GLFB"), *_pairs())
    assert record.encoder_head_kinds == ["GLFB", "GLFB"]  # 4 heads: one per kind
    sentence = record.sentence(0)  # 7 source tokens
    i = torch.arange(7).view(-1, 1)
    j = torch.arange(7).view(1, -1)
    w = sentence.encoder_self  # (L, H, S, S)
    assert w[:, 1][..., (i - j).abs() > 1].abs().max() == 0  # local, window 1
    assert w[:, 2][..., j < i].abs().max() == 0  # forward: j >= i
    assert w[:, 3][..., j > i].abs().max() == 0  # backward: j <= i
    assert w[:, 0].min() > 0  # global: every key
    assert force_decode(_model("standard"), *_pairs()).encoder_head_kinds == ["GGGG", "GGGG"]


def test_multihop_head_gate_is_recorded_only_where_the_second_hop_is():
    record = force_decode(_model("multihop[1]"), *_pairs())
    assert list(record.head_gate) == [1]
    gate = record.head_gate[1]  # (B, S, H)
    assert gate.shape == (3, 7, 4)
    torch.testing.assert_close(gate.sum(-1), torch.ones(3, 7, dtype=gate.dtype))
    sentence = record.sentence(1)  # source length 3
    assert sentence.head_gate[1].shape == (4, 3)  # head-first, cut to the sentence
    torch.testing.assert_close(sentence.head_gate[1], gate[1, :3].T)


def test_mlmha_per_layer_weights_and_their_mean():
    record = force_decode(_model("mlmha/M-11"), *_pairs())
    assert sorted(record.layer_weights) == [0, 1]
    for layer, w in record.layer_weights.items():
        assert w.shape == (3, 2, 4, 7, 7)  # (B, n encoder layers, H, T, S)
        for f in range(2):
            _assert_distributions(w[:, f], record.src_lengths, record.tgt_lengths)
        torch.testing.assert_close(record.cross[layer], w.mean(dim=1))
    joint = force_decode(_model("mlmha/M-01/n1"), *_pairs())
    assert joint.layer_weights[0].shape == (3, 1, 4, 7, 7)
    assert joint.sentence(0).layer_weights[1].shape == (1, 4, 5, 7)


@pytest.mark.parametrize("kind", ["gmm/approximate", "gmm/strict/[1]"])
def test_gmm_components_reproduce_the_recorded_weights(kind):
    model = _model(kind)
    record = force_decode(model, *_pairs())
    layers = [0, 1] if kind == "gmm/approximate" else [1]
    assert sorted(record.gmm) == layers
    normalization = "approximate" if kind == "gmm/approximate" else "strict"
    K = model.config.decoder.gmm_components
    real = (torch.arange(7).view(1, 1, 1, -1) < record.src_lengths.view(-1, 1, 1, 1))  # (B, 1, 1, S)
    for layer in layers:
        g = record.gmm[layer]
        assert g["omega"].shape == g["mu"].shape == g["sigma"].shape == (3, 4, 7, K)
        torch.testing.assert_close(g["omega"].sum(-1), torch.ones(3, 4, 7, dtype=torch.float64))
        assert (g["sigma"] > 0).all() and ((g["gate"] > 0) & (g["gate"] < 1)).all()
        J = record.src_lengths.view(-1, 1, 1, 1).double()
        assert ((g["mu"] >= 0) & (g["mu"] <= J)).all()
        beta = mixture_weights(g["omega"], g["mu"], g["sigma"], real, normalization=normalization,
                               sigma_floor=model.decoder_layers[layer].cross_attn.attn.config.sigma_floor)
        torch.testing.assert_close(g["beta"], beta)
        gate = g["gate"].unsqueeze(-1)
        torch.testing.assert_close(g["gamma"], (1 - gate) * g["alpha"] + gate * g["beta"])
        torch.testing.assert_close(record.cross[layer], g["gamma"])
        _assert_distributions(g["alpha"], record.src_lengths, record.tgt_lengths)
    if kind == "gmm/strict/[1]":
        _assert_distributions(record.cross[1], record.src_lengths, record.tgt_lengths)  # strict: gamma sums to 1
        _assert_distributions(record.cross[0], record.src_lengths, record.tgt_lengths)  # layer 0: dot product
    cut = record.sentence(2)  # source 5, decoder positions 2
    assert cut.gmm[layers[-1]]["mu"].shape == (4, 2, K) and cut.gmm[layers[-1]]["beta"].shape == (4, 2, 5)


@pytest.mark.parametrize("kind", ["mma/GLFB", "multihop[1]", "mlmha/M-11", "gmm/approximate", "lstm/fused"])
def test_reference_record_equals_the_fused_path_weights(kind):
    model = _model(kind)
    sources, targets = _pairs(seed=1)
    ours = force_decode(model, sources, targets)
    fused = force_decode(model, sources, targets, reference=False)
    for a, b in zip(ours.encoder_self + ours.decoder_self + ours.cross, fused.encoder_self + fused.decoder_self
                    + fused.cross):
        torch.testing.assert_close(a, b)
    for layer in ours.head_gate:
        torch.testing.assert_close(ours.head_gate[layer], fused.head_gate[layer])
    for layer in ours.gmm:
        for name in ("alpha", "beta", "gamma", "mu", "sigma", "omega", "gate"):
            torch.testing.assert_close(ours.gmm[layer][name], fused.gmm[layer][name])


@pytest.mark.parametrize("kind", ["mma/GLFB", "gmm/approximate", "mlmha/M-11", "lstm/fused"])
def test_record_mode_computes_the_same_logits_and_leaves_the_model_as_it_was(kind):
    model = _model(kind)
    sources, targets = _pairs()
    src = torch.nn.utils.rnn.pad_sequence(sources, batch_first=True)
    lengths = torch.tensor([len(s) for s in sources])
    prev = torch.nn.utils.rnn.pad_sequence([torch.cat([torch.tensor([1]), t]) for t in targets], batch_first=True)
    configs = {name: m.config for name, m in model.named_modules() if isinstance(m, SWITCHABLE)}
    assert {c.implementation for c in configs.values()} <= {"fused", "reference"}
    with torch.no_grad():
        plain = model(src, lengths, prev)
        with record_attention(model) as recorder:
            for m in model.modules():
                if isinstance(m, SWITCHABLE):
                    assert m.config.implementation == "reference"
            recorded = model(src, lengths, prev)
    torch.testing.assert_close(recorded, plain)
    collect_attention(model, recorder, src_lengths=lengths, tgt_lengths=torch.tensor([5, 7, 2]))
    for name, m in model.named_modules():
        assert not m._forward_hooks and not m._forward_pre_hooks, name
        if name in configs:
            assert m.config is configs[name]


def test_two_passes_in_one_context_are_refused():
    model = _model("mma/GLFB")
    src, lengths = torch.randint(4, 37, (1, 4)), torch.tensor([4])
    prev = torch.tensor([[1, 5, 6]])
    with torch.no_grad(), record_attention(model) as recorder:
        model(src, lengths, prev)
        model(src, lengths, prev)
    with pytest.raises(RuntimeError, match="called 2 times"):
        collect_attention(model, recorder, src_lengths=lengths, tgt_lengths=torch.tensor([3]))


def test_force_decode_rejects_empty_sources_and_mismatched_lists():
    model = _model("standard")
    with pytest.raises(ValueError, match="no tokens"):
        force_decode(model, [torch.tensor([5]), torch.tensor([], dtype=torch.long)], [torch.tensor([5])] * 2)
    with pytest.raises(ValueError, match="one target per source"):
        force_decode(model, [torch.tensor([5])], [])


def test_force_decode_sentences_matches_one_batch_and_keeps_the_order():
    model = _model("mma/GLFB")
    sources, targets = _pairs()
    whole = force_decode(model, sources, targets)
    parts = list(force_decode_sentences(model, sources, targets, batch_size=2))
    assert [p.source_length for p in parts] == [7, 3, 5] and [p.target_length for p in parts] == [5, 7, 2]
    for index, part in enumerate(parts):
        torch.testing.assert_close(part.encoder_self, whole.sentence(index).encoder_self)
        torch.testing.assert_close(part.cross, whole.sentence(index).cross)


def test_force_decode_restores_training_mode():
    model = _model("standard").train()
    force_decode(model, *_pairs())
    assert model.training


def test_layer_masking_zeroes_one_encoder_layer_and_restores():
    model = _model("mlmha/M-11")
    sources, targets = _pairs()
    full = force_decode(model, sources, targets).cross[1]
    with masked_encoder_layer(model, 2):
        masked = force_decode(model, sources, targets).cross[1]
        assert {c.masked_layer for c in model.modules() if hasattr(c, "masked_layer")} == {2}
    assert {c.masked_layer for c in model.modules() if hasattr(c, "masked_layer")} == {None}
    assert (masked - full).abs().max() > 1e-6
    torch.testing.assert_close(force_decode(model, sources, targets).cross[1], full)
    with pytest.raises(ValueError, match="layer must lie in"):
        with masked_encoder_layer(model, 3):
            pass
    with pytest.raises(ValueError, match="no multi-layer"):
        with masked_encoder_layer(_model("standard"), 1):
            pass


def test_alignment_attention_fn_groups_pieces_into_the_gold_words(tiny_data):
    from mma_nmt.analysis import align_with_model, GoldAlignment
    from mma_nmt.data import Tokenizer

    tokenizer = Tokenizer.load(tiny_data / "spm_src.model")
    config = replace(tiny_transformer(d_model=16, ffn_dim=32), src_vocab_size=tokenizer.vocab_size,
                     tgt_vocab_size=tokenizer.vocab_size)
    torch.manual_seed(0)
    model = build_model(config).eval()
    german, english = "Zwei junge Männer spielen Fußball .".split(), "Two young men play soccer .".split()
    ids, word_ids = encode_words(tokenizer, german)
    assert word_ids[0] == 0 and word_ids[-1] == len(german) - 1 and sorted(set(word_ids)) == list(range(6))
    assert tokenizer.encode(" ".join(german)) == ids  # word by word = the whole line
    out = alignment_attention_fn(model, tokenizer, tokenizer)(german, english)
    tgt_pieces = len(encode_words(tokenizer, english)[0])
    assert out["cross_attention"].shape == (2, 4, tgt_pieces + 1, len(ids))
    assert out["target_word_ids"][-1] == -1
    gold = GoldAlignment(german=german, english=english, sure={(k, k) for k in range(6)},
                         possible={(k, k) for k in range(6)})
    scores = align_with_model(alignment_attention_fn(model, tokenizer, tokenizer), [gold])
    assert scores.hypothesis_links == 6  # one link per English word


def test_to_bertviz_gives_head_view_arguments_per_layer_and_place():
    record = force_decode(_model("mma/GLFB"), *_pairs())
    sentence = record.sentence(1)  # source length 3, target length 7 (BOS + 6)
    source, target = ["ein", "Hund", "</s>"], ["<s>", "a", "dog", "runs", "in", "the", "park"]
    views = sentence.to_bertviz(source, target)
    assert views["encoder_tokens"] == source and views["decoder_tokens"] == target
    shapes = {"encoder_attention": (1, 4, 3, 3), "decoder_attention": (1, 4, 7, 7), "cross_attention": (1, 4, 7, 3)}
    for name, shape in shapes.items():
        layers = views[name]
        assert isinstance(layers, tuple) and len(layers) == 2  # 2 layers, as bertviz takes them
        assert all(layer.shape == shape for layer in layers)
    torch.testing.assert_close(views["cross_attention"][1][0], sentence.cross[1])
    torch.testing.assert_close(views["encoder_attention"][0][0], sentence.encoder_self[0])
    lstm = force_decode(_model("lstm/reference"), *_pairs()).sentence(0).to_bertviz(["x"] * 7, ["y"] * 5)
    assert set(lstm) == {"cross_attention", "encoder_tokens", "decoder_tokens"}  # no self-attention to show
    with pytest.raises(ValueError, match="to_bertviz: source_tokens has 2 tokens but the sentence has 3"):
        sentence.to_bertviz(source[:2], target)
