"""LSTM encoder-decoder with multi-head Luong attention (SPEC section 2)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from mma_nmt.decoding.beam import beam_search
from mma_nmt.decoding.search import SearchConfig, greedy_search
from mma_nmt.models import build_model, preset
from mma_nmt.models.lstm_attention import (
    build_luong_attention,
    holds_reference_layout,
    luong_module_to_reference,
    luong_reference_to_module,
)
from mma_nmt.modules import LuongAttentionConfig, LuongMultiheadAttention
from mma_nmt.training.checkpoint import CheckpointError, save_checkpoint
from mma_nmt.training.config import load_run_config
from mma_nmt.training.trainer import Trainer
from nmt_fixtures import random_batch, tiny_data, tiny_overrides  # noqa: F401  (fixture)


def tiny_lstm(**overrides):
    return preset("lstm_tiny", src_vocab_size=37, tgt_vocab_size=41, dropout=0.0, **overrides)


def test_incremental_decoding_equals_full_forward():
    torch.manual_seed(0)
    model = build_model(tiny_lstm(layers=2)).eval()
    src, lengths, prev, _ = random_batch(batch=4)
    full = model(src, lengths, prev)
    encoder_out, state = model.encode(src, lengths), {}
    steps = [model.decode(prev[:, : t + 1], encoder_out, state)[0] for t in range(prev.shape[1])]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("implementation", ["reference", "fused"])
def test_single_head_matches_luong_general_attention_by_hand(implementation):
    torch.manual_seed(1)
    attention = LuongMultiheadAttention(LuongAttentionConfig(hidden_dim=6, num_heads=1, softmax_dim=4, feed_dim=2,
                                                             implementation=implementation))
    states, query = torch.randn(2, 5, 6), torch.randn(2, 6)
    lengths = torch.tensor([5, 3])
    a_sm, a_fd, alpha = attention(query, attention.precompute(states, key_lengths=lengths), need_weights=True)
    # the earlier layout: score (dh, dh), w_softmax (1, 2dh, d_sm), w_feed (1, 2dh, d_fd), acting on [c; h_t]
    w_sc, w_softmax, w_feed = luong_module_to_reference(attention.w_sc, attention.w_context, attention.w_state, 4)
    w_sc = w_sc.detach()  # (dh, dh): key = W_sc hs
    for b in range(2):
        n = int(lengths[b])
        e = torch.stack([query[b] @ (w_sc @ states[b, s]) for s in range(n)])
        weights = torch.softmax(e, dim=0)
        context = (weights.unsqueeze(1) * states[b, :n]).sum(0)
        joined = torch.cat([context, query[b]])
        torch.testing.assert_close(alpha[b, 0, :n], weights)
        assert float(alpha[b, 0, n:].detach().abs().sum()) == 0.0
        torch.testing.assert_close(a_sm[b], torch.tanh(joined @ w_softmax[0]))
        torch.testing.assert_close(a_fd[b], torch.tanh(joined @ w_feed[0]))


def test_the_encoder_equals_each_sentence_run_alone():
    """The packed encoder (sorted on the host, unsorted on the device) against nn.LSTM run on each sentence alone,
    unpadded: states, padding rows 0, each layer's final (h, c), and the embedding's gradient. The lengths hold ties, a
    length-1 sentence and are not sorted."""
    torch.manual_seed(3)
    model = build_model(tiny_lstm(layers=2)).double()
    encoder = model.encoder
    lengths = torch.tensor([3, 5, 1, 5, 2])
    src = torch.randint(4, 37, (5, 6))
    src[torch.arange(6) >= lengths.unsqueeze(1)] = 0
    out = encoder(src, lengths)
    half = encoder.rnn.hidden_size
    loss = out.out.square().sum() + out.extra["h"].sum() + 2 * out.extra["c"].sum()
    (grad,) = torch.autograd.grad(loss, encoder.embedding.weight)
    expected_loss = 0.0
    for b, n in enumerate(lengths.tolist()):
        states, (h, c) = encoder.rnn(encoder.embedding(src[b:b + 1, :n]))  # (1, n, dh), (layers*2, 1, dh/2)
        torch.testing.assert_close(out.out[b, :n], states[0])
        assert out.out[b, n:].abs().sum().item() == 0.0  # every sentence is padded (S = 6)
        for layer in range(2):
            for direction in range(2):
                columns = slice(direction * half, (direction + 1) * half)
                torch.testing.assert_close(out.extra["h"][b, layer, columns], h[2 * layer + direction, 0])
                torch.testing.assert_close(out.extra["c"][b, layer, columns], c[2 * layer + direction, 0])
        expected_loss = expected_loss + states.square().sum() + h.sum() + 2 * c.sum()
    (expected_grad,) = torch.autograd.grad(expected_loss, encoder.embedding.weight)
    torch.testing.assert_close(grad, expected_grad)
    assert torch.equal(out.lengths, lengths) and out.lengths.device == src.device


def test_padding_does_not_change_the_output():
    torch.manual_seed(2)
    model = build_model(tiny_lstm(heads=2)).eval()
    src, lengths, prev, _ = random_batch(batch=3)
    other = src.clone()
    other[src == 0] = 9  # different tokens where there is padding
    torch.testing.assert_close(model(src, lengths, prev), model(other, lengths, prev))


def test_beam_size_one_equals_greedy_for_the_lstm():
    torch.manual_seed(3)
    model = build_model(tiny_lstm()).eval()
    src, lengths, _, _ = random_batch(batch=3)
    config = SearchConfig(beam_size=1, max_len_a=1.0, max_len_b=4, length_penalty="avg")
    assert [h.tokens for h in greedy_search(model, src, lengths, config)] == \
        [hyps[0].tokens for hyps in beam_search(model, src, lengths, config)]
    assert all(hyps for hyps in beam_search(model, src, lengths, replace(config, beam_size=3)))


def test_fused_luong_checkpoint_loads_into_the_reference_model_and_back():
    torch.manual_seed(5)
    fused = build_model(tiny_lstm(heads=2, implementation="fused")).eval()
    reference = build_model(tiny_lstm(heads=2, implementation="reference")).eval()
    reference.load_state_dict(fused.state_dict())
    src, lengths, prev, _ = random_batch(batch=3)
    torch.testing.assert_close(fused(src, lengths, prev), reference(src, lengths, prev), rtol=1e-5, atol=1e-5)
    again = build_model(tiny_lstm(heads=2, implementation="fused")).eval()
    again.load_state_dict(reference.state_dict())
    torch.testing.assert_close(again(src, lengths, prev), reference(src, lengths, prev), rtol=1e-5, atol=1e-5)


def _earlier_layout(state_dict: dict, softmax_dim: int) -> dict:
    """``state_dict`` with the attention as checkpoints before issue 23 held it (both implementations), built by hand
    from the paper's matrices: ``score.weight`` (h*dh, dh) stacks the W_sc_i; ``w_softmax`` (h, 2dh, d_sm/h) and
    ``w_feed`` (h, 2dh, d_fd/h) hold W_sm_i^T and W_fd_i^T, which act on [c_i; h_t]."""
    old = dict(state_dict)
    w_sc, w_context, w_state = (old.pop(f"decoder.attention.{name}") for name in ("w_sc", "w_context", "w_state"))
    heads, dh, _ = w_sc.shape
    paper = torch.cat([w_context, w_state], dim=2)  # (h, d_sm/h + d_fd/h, 2dh): [W_sm_i; W_fd_i]
    sm = softmax_dim // heads
    old["decoder.attention.score.weight"] = w_sc.reshape(heads * dh, dh).clone()
    old["decoder.attention.w_softmax"] = paper[:, :sm].transpose(1, 2).clone()
    old["decoder.attention.w_feed"] = paper[:, sm:].transpose(1, 2).clone()
    return old


@pytest.mark.parametrize("implementation", ["reference", "fused"])
def test_checkpoint_in_the_earlier_layout_loads_with_identical_outputs(implementation, tmp_path):
    config = tiny_lstm(heads=2, layers=2, implementation=implementation)
    torch.manual_seed(6)
    written = build_model(config).eval()
    torch.save({"model": _earlier_layout(written.state_dict(), config.softmax_dim)}, tmp_path / "old.pt")
    torch.manual_seed(7)
    loaded = build_model(config).eval()
    loaded.load_state_dict(torch.load(tmp_path / "old.pt")["model"])  # strict: every key matched
    src, lengths, prev, _ = random_batch(batch=3)
    with torch.no_grad():
        assert torch.equal(loaded(src, lengths, prev), written(src, lengths, prev))
    # new checkpoints are written in the module's own layout
    assert {"decoder.attention.w_sc", "decoder.attention.w_context", "decoder.attention.w_state"} <= \
        loaded.state_dict().keys()
    assert not any(name.endswith(("score.weight", "w_softmax", "w_feed")) for name in loaded.state_dict())


def test_layout_conversion_round_trips():
    heads, dh, sm, fd = 2, 5, 6, 4
    w_sc, w_context, w_state = torch.randn(heads, dh, dh), torch.randn(heads, 5, dh), torch.randn(heads, 5, dh)
    earlier = luong_module_to_reference(w_sc, w_context, w_state, sm)
    assert [tuple(t.shape) for t in earlier] == [(heads * dh, dh), (heads, 2 * dh, sm // heads),
                                                 (heads, 2 * dh, fd // heads)]
    for got, want in zip(luong_reference_to_module(*earlier, heads=heads), (w_sc, w_context, w_state)):
        assert torch.equal(got, want)
    score, w_softmax, w_feed = torch.randn(heads * dh, dh), torch.randn(heads, 2 * dh, 3), torch.randn(heads, 2 * dh, 2)
    again = luong_module_to_reference(*luong_reference_to_module(score, w_softmax, w_feed, heads=heads), sm)
    for got, want in zip(again, (score, w_softmax, w_feed)):
        assert torch.equal(got, want)


def test_a_seed_draws_the_attention_weights_of_the_earlier_module():
    """The earlier plain-PyTorch module drew ``score = nn.Linear(dh, h*dh, bias=False)``, then ``w_softmax`` and
    ``w_feed`` from U(+-1/sqrt(2dh)) in its layout: the same seed gives the same weights now."""
    config = tiny_lstm(heads=2, hidden_size=8, softmax_dim=6, feed_dim=4)
    torch.manual_seed(3)
    score = torch.nn.Linear(8, 2 * 8, bias=False).weight.detach()
    bound = 1.0 / math.sqrt(2 * 8)
    w_softmax = torch.empty(2, 16, 3).uniform_(-bound, bound)
    w_feed = torch.empty(2, 16, 2).uniform_(-bound, bound)
    after = torch.rand(4)
    torch.manual_seed(3)
    attention = build_luong_attention(config)
    for got, want in zip((attention.w_sc, attention.w_context, attention.w_state),
                         luong_reference_to_module(score, w_softmax, w_feed, heads=2)):
        assert torch.equal(got.detach(), want)
    assert torch.equal(torch.rand(4), after)  # the draws after it (the output layer) are the same too


def test_param_init_draws_the_attention_weights_in_the_earlier_order():
    """With ``param_init`` every parameter was drawn in ``parameters()`` order; the earlier module's were
    ``w_softmax``, ``w_feed``, ``score.weight`` (its own before its submodule's)."""
    torch.manual_seed(4)
    model = build_model(tiny_lstm(heads=2, param_init=0.1))
    torch.manual_seed(4)
    build_model(tiny_lstm(heads=2))  # the same draws before param_init's
    drawn = {}
    for name, parameter in model.named_parameters():
        if name.startswith("decoder.attention."):
            if not drawn:
                sm, fd = model.config.softmax_dim // 2, model.config.feed_dim // 2
                dh = model.config.hidden_size
                drawn["w_softmax"] = torch.empty(2, 2 * dh, sm).uniform_(-0.1, 0.1)
                drawn["w_feed"] = torch.empty(2, 2 * dh, fd).uniform_(-0.1, 0.1)
                drawn["score"] = torch.empty(2 * dh, dh).uniform_(-0.1, 0.1)
            continue
        expected = torch.empty_like(parameter).uniform_(-0.1, 0.1)
        if "embedding" in name:
            expected[model.config.pad_id] = 0.0
        assert torch.equal(parameter.detach(), expected), name
    attention = model.decoder.attention
    for got, want in zip((attention.w_sc, attention.w_context, attention.w_state),
                         luong_reference_to_module(drawn["score"], drawn["w_softmax"], drawn["w_feed"], heads=2)):
        assert torch.equal(got.detach(), want)


def test_paper_preset_sizes():
    config = preset("lstm_iwslt15")
    assert (config.embed_dim, config.hidden_size, config.layers, config.heads) == (1024, 1024, 2, 4)
    assert (config.softmax_dim, config.feed_dim, config.dropout) == (512, 1024, 0.5)


def test_param_init_draws_every_weight_from_the_uniform_range():
    """OpenNMT-py's -param_init 0.1: every weight in U(-0.1, 0.1), spread over the range (std 0.1 / sqrt(3)); the
    padding embeddings stay zero. PyTorch's own initialisation leaves some weights outside that range."""
    torch.manual_seed(0)
    default = build_model(tiny_lstm())
    assert max(float(p.detach().abs().max()) for p in default.parameters()) > 0.1
    model = build_model(tiny_lstm(param_init=0.1))
    for name, parameter in model.named_parameters():
        parameter = parameter.detach()
        assert float(parameter.abs().max()) <= 0.1, name
        if parameter.numel() >= 1000:
            assert float(parameter.std()) == pytest.approx(0.1 / 3 ** 0.5, rel=0.1), name
    for embedding in (model.encoder.embedding, model.decoder.embedding):
        assert float(embedding.weight.detach()[model.config.pad_id].abs().max()) == 0.0
    with pytest.raises(ValueError, match="param_init"):
        tiny_lstm(param_init=-0.1)


def test_training_refuses_to_resume_from_a_checkpoint_in_the_earlier_layout(tmp_path, tiny_data):  # noqa: F811
    """Its weights load, but its Adam moments have the earlier shapes: resuming says so instead of a shape error."""
    overrides = tiny_overrides(tiny_data, tmp_path, "train.save_every=2", model=["model.preset=lstm_tiny"])
    Trainer(load_run_config(None, [*overrides, "train.max_steps=2"])).train()
    payload = torch.load(tmp_path / "last.pt", weights_only=True)
    payload["model"] = _earlier_layout(payload["model"], softmax_dim=tiny_lstm().softmax_dim)
    assert holds_reference_layout(payload["model"])
    save_checkpoint(payload, tmp_path / "last.pt")
    with pytest.raises(CheckpointError, match="earlier layout.*cannot resume"):
        Trainer(load_run_config(None, [*overrides, "train.max_steps=4"])).train()
