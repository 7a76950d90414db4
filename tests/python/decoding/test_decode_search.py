"""Greedy and beam search: hand-built probability tables, beam 1 = greedy, length penalties, length limits."""

from __future__ import annotations

import math

import pytest
import torch

from mma_nmt.decoding.penalties import LENGTH_PENALTIES, max_lengths
from mma_nmt.decoding.beam import beam_search
from mma_nmt.decoding.search import SearchConfig, greedy_search
from mma_nmt.models import EncoderOut, build_model
from nmt_fixtures import random_batch, tiny_transformer

A, B, EOS = 3, 4, 2
# Next-token probabilities given the prefix (after BOS); anything unlisted ends the sentence.
TABLE = {(): {A: 0.55, B: 0.45}, (A,): {A: 0.4, B: 0.3, EOS: 0.3}, (B,): {B: 0.9, A: 0.05, EOS: 0.05}}


class TableModel(torch.nn.Module):
    """A 'model' whose next-token distribution is read from TABLE; counts decode calls in its state."""

    vocab = 5

    def encode(self, src, src_lengths, need_weights=False):
        return EncoderOut(out=torch.zeros(src.shape[0], src.shape[1], 1), lengths=src_lengths)

    def decode(self, prev_tokens, encoder_out, incremental_state=None, need_weights=False):
        rows = []
        for prefix in prev_tokens[:, 1:].tolist():
            probs = torch.full((self.vocab,), 1e-12)
            for token, p in TABLE.get(tuple(prefix), {EOS: 1.0}).items():
                probs[token] = p
            rows.append(probs.log())
        if incremental_state is not None:
            incremental_state.setdefault("calls", torch.zeros(prev_tokens.shape[0]))
            incremental_state["calls"] += 1
        return torch.stack(rows).unsqueeze(1), None  # (N, 1, V)


def _src(batch=2):
    return torch.full((batch, 3), 5), torch.full((batch,), 3)


def test_hand_built_table_gives_known_best_beam():
    config = SearchConfig(beam_size=2, length_penalty="none", max_len_a=0.0, max_len_b=6)
    results = beam_search(TableModel(), *_src(), config)
    for hyps in results:
        assert hyps[0].tokens == [B, B]
        assert hyps[0].score == pytest.approx(math.log(0.45 * 0.9), abs=1e-6)
        assert hyps[1].tokens == [A, A]  # second-best finished: 0.55 * 0.4 = 0.22 beats A EOS (0.165)
    greedy = greedy_search(TableModel(), *_src(), SearchConfig(beam_size=1, length_penalty="none",
                                                                max_len_a=0.0, max_len_b=6))
    assert [h.tokens for h in greedy] == [[A, A], [A, A]]  # greedy misses the best sequence


def test_length_penalty_changes_the_ranking_of_finished_hypotheses():
    """With "avg" hypotheses are ranked by mean log-probability per token (EOS included)."""
    config = SearchConfig(beam_size=3, length_penalty="avg", max_len_a=0.0, max_len_b=6)
    best = beam_search(TableModel(), *_src(1), config)[0]
    normalized = [h.normalized for h in best]
    assert normalized == sorted(normalized, reverse=True)
    assert best[0].normalized == pytest.approx(math.log(0.405) / 3, abs=1e-6)


def test_beam_size_one_equals_greedy():
    torch.manual_seed(5)
    model = build_model(tiny_transformer()).eval()
    src, lengths, _, _ = random_batch(batch=4)
    config = SearchConfig(beam_size=1, max_len_a=1.0, max_len_b=5)
    greedy = greedy_search(model, src, lengths, config)
    beam = [hyps[0] for hyps in beam_search(model, src, lengths, config)]
    assert [h.tokens for h in greedy] == [h.tokens for h in beam]
    for g, b in zip(greedy, beam):
        assert g.score == pytest.approx(b.score, abs=1e-5)


def test_outputs_respect_the_maximum_length_rule():
    torch.manual_seed(6)
    model = build_model(tiny_transformer()).eval()
    src, lengths, _, _ = random_batch(batch=3)
    config = SearchConfig(beam_size=3, max_len_a=0.5, max_len_b=1)
    limits = max_lengths(lengths.tolist(), 0.5, 1)
    for hyps, limit in zip(beam_search(model, src, lengths, config), limits):
        assert hyps and all(len(h.tokens) + 1 <= limit for h in hyps)


def test_length_penalty_values():
    assert LENGTH_PENALTIES["none"](7, 1.0) == 1.0
    assert LENGTH_PENALTIES["avg"](7, 0.3) == 7.0
    assert LENGTH_PENALTIES["fairseq"](4, 0.5) == pytest.approx(2.0)
    assert LENGTH_PENALTIES["wu"](7, 1.0) == pytest.approx(2.0)


def test_beam_search_reorders_the_incremental_state():
    state_calls = []

    class Spy(TableModel):
        def decode(self, prev_tokens, encoder_out, incremental_state=None, need_weights=False):
            state_calls.append(incremental_state is not None)
            return super().decode(prev_tokens, encoder_out, incremental_state)

    beam_search(Spy(), *_src(1), SearchConfig(beam_size=2, length_penalty="none", max_len_a=0.0, max_len_b=6))
    assert state_calls and all(state_calls)
