"""The beam search's bookkeeping as tensors (``mma_nmt.decoding.beam``) against the walk it replaced, one sentence and
one candidate at a time on the host (``mma_nmt.reference.beam_search``): the same hypotheses, in the same order, with
the same scores to the bit, over random next-token tables with ties and impossible tokens, every length penalty,
forced ends at different lengths, ``min_len``, and real models; and one host read per step."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
import torch

from mma_nmt.decoding.beam import beam_search
from mma_nmt.decoding.search import SearchConfig, SpecialIds
from mma_nmt.models import EncoderOut, build_model, preset
from mma_nmt.reference.beam_search import beam_search_reference
from nmt_fixtures import random_batch, tiny_transformer

IDS = SpecialIds()


class PrefixTableModel(torch.nn.Module):
    """Next-token logits drawn from a generator seeded by the sentence and the whole prefix: a random table that only
    the prefix decides, so that a beam reordered to the wrong row changes the result. Logits are rounded to halves
    (ties among candidates) and ``impossible`` tokens of each prefix get -inf (fewer live candidates than beams)."""

    def __init__(self, vocab: int, seed: int, impossible: int = 0):
        super().__init__()
        self.vocab, self.seed, self.impossible = vocab, seed, impossible

    def encode(self, src, src_lengths, need_weights=False):
        return EncoderOut(out=src.unsqueeze(-1).float(), lengths=src_lengths)

    def decode(self, prev_tokens, encoder_out, incremental_state=None, need_weights=False):
        rows = []
        for sentence, prefix in zip(encoder_out.out[:, 0, 0].tolist(), prev_tokens.tolist()):
            g = torch.Generator().manual_seed(hash((self.seed, sentence, *prefix)) % 2**62)
            logits = (torch.randn(self.vocab, generator=g) * 4).round() / 2
            logits[torch.randperm(self.vocab, generator=g)[:self.impossible]] = float("-inf")
            rows.append(logits)
        return torch.stack(rows).unsqueeze(1), None  # (N, 1, V)


def _sources(batch: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, 9, (batch,), generator=g)
    src = torch.zeros(batch, int(lengths.max()), dtype=torch.long)
    src[:, 0] = torch.arange(batch) + 10 * seed  # the sentence's identity for PrefixTableModel
    return src, lengths


def _assert_same(got, want):
    assert len(got) == len(want)
    for b, (hyps, ref) in enumerate(zip(got, want)):
        assert [h.tokens for h in hyps] == [h.tokens for h in ref], f"sentence {b}"
        assert [(h.score, h.normalized) for h in hyps] == [(h.score, h.normalized) for h in ref], f"sentence {b}"


CASES = list(itertools.product([2, 3, 5], ["none", "fairseq", "avg", "wu"], [0, 2]))


@pytest.mark.parametrize("beam,penalty,min_len", CASES)
@pytest.mark.parametrize("seed", range(4))
def test_random_tables_give_the_walks_hypotheses(beam, penalty, min_len, seed):
    """Vocabularies of 6-9 (PAD, BOS, EOS and 3-6 words: EOS is often among the top candidates), some tokens
    impossible per prefix, outputs limited to 0.5 x the source + 3 (sentences forced to end at different steps)."""
    model = PrefixTableModel(vocab=6 + seed % 4, seed=seed, impossible=seed % 3)
    src, lengths = _sources(batch=5, seed=seed)
    config = SearchConfig(beam_size=beam, length_penalty=penalty, alpha=0.6 + 0.2 * seed, max_len_a=0.5, max_len_b=3,
                          min_len=min_len)
    want = beam_search_reference(model, src, lengths, config, IDS)
    assert sum(len(hyps) for hyps in want) > 5  # hypotheses finished, some sentences with several
    _assert_same(beam_search(model, src, lengths, config, IDS), want)


@pytest.mark.parametrize("build", [
    lambda: tiny_transformer(src_vocab_size=37, tgt_vocab_size=9),
    lambda: preset("lstm_tiny", src_vocab_size=37, tgt_vocab_size=9, embed_dim=16, hidden_size=16, softmax_dim=16,
                   feed_dim=8),
], ids=["transformer", "lstm"])
@pytest.mark.parametrize("beam", [2, 4])
def test_real_models_give_the_walks_hypotheses(build, beam):
    """Random weights of a 9-token vocabulary (EOS among the top candidates at varied steps), eval mode."""
    torch.manual_seed(beam)
    model = build_model(build()).eval()
    src, lengths, _, _ = random_batch(batch=6, src_len=8)
    config = SearchConfig(beam_size=beam, max_len_a=1.0, max_len_b=2)
    want = beam_search_reference(model, src, lengths, config, IDS)
    _assert_same(beam_search(model, src, lengths, config, IDS), want)
    _assert_same(beam_search(model, src, lengths, replace(config, length_penalty="wu"), IDS),
                 beam_search_reference(model, src, lengths, replace(config, length_penalty="wu"), IDS))


def test_one_host_read_per_step(monkeypatch):
    """The bookkeeping reads the device once per step (whether every sentence has finished) and once at the end
    (the finished hypotheses); the walk it replaced read every candidate and wrote the beams back each step."""
    reads = []
    for name in ("item", "tolist", "__bool__", "cpu"):
        original = getattr(torch.Tensor, name)
        monkeypatch.setattr(torch.Tensor, name, lambda self, *a, _o=original, _n=name, **k: reads.append(_n)
                            or _o(self, *a, **k))
    model = PrefixTableModel(vocab=7, seed=0)
    src, lengths = _sources(batch=4, seed=0)
    config = SearchConfig(beam_size=3, max_len_a=0.0, max_len_b=6)
    decode, steps = model.decode, []  # the stand-in model reads its prefixes on the host: not the search's reads

    def counting_decode(*args, **kwargs):
        before = len(reads)
        out = decode(*args, **kwargs)
        steps.append(len(reads) - before)
        return out

    monkeypatch.setattr(model, "decode", counting_decode)
    reads.clear()
    beam_search(model, src, lengths, config, IDS)
    search_reads = len(reads) - sum(steps)
    # src_lengths.tolist() for the limits, one bool per step, four tolist() of the finished hypotheses at the end
    assert search_reads == 1 + len(steps) + 4, (reads, steps)
