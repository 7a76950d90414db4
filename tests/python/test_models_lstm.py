"""LSTM encoder-decoder with multi-head Luong attention (SPEC section 2)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from mma_nmt.decoding.search import SearchConfig, beam_search, greedy_search
from mma_nmt.models import build_model, preset
from mma_nmt.models.luong import MultiHeadLuongAttention
from nmt_fixtures import random_batch


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


def test_single_head_matches_luong_general_attention_by_hand():
    torch.manual_seed(1)
    attention = MultiHeadLuongAttention(hidden=6, heads=1, softmax_dim=4, feed_dim=2)
    states, query = torch.randn(2, 5, 6), torch.randn(2, 6)
    lengths = torch.tensor([5, 3])
    a_sm, a_fd, alpha = attention(query, attention.precompute_keys(states), states, lengths)
    w_sc = attention.score.weight  # (dh, dh): key = W_sc hs
    for b in range(2):
        n = int(lengths[b])
        e = torch.stack([query[b] @ (w_sc @ states[b, s]) for s in range(n)])
        weights = torch.softmax(e, dim=0)
        context = (weights.unsqueeze(1) * states[b, :n]).sum(0)
        joined = torch.cat([context, query[b]])
        torch.testing.assert_close(alpha[b, 0, :n], weights)
        assert float(alpha[b, 0, n:].detach().abs().sum()) == 0.0
        torch.testing.assert_close(a_sm[b], torch.tanh(joined @ attention.w_softmax[0]))
        torch.testing.assert_close(a_fd[b], torch.tanh(joined @ attention.w_feed[0]))


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
