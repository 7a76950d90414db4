"""Batched beam search with its bookkeeping on the search's device.

Rows are sentence-major: row ``b * K + k`` is beam k of sentence b. At each step every sentence's 2K best candidates
(score of the beam + log-probability of the token) are walked in order, as tensors for all sentences at once: an EOS
among the top K finishes a hypothesis (until the sentence holds K finished ones), and the first K other candidates
continue. A sentence with K finished hypotheses takes no candidate any more; its rows stay in the batch, dead (score
-inf), so that every step keeps the shapes of the first. The step's only host read is whether every sentence has
finished; the finished hypotheses stay on the device until the search ends (:class:`FinishedBeams`).
"""

from __future__ import annotations

import torch

from mma_nmt.decoding.penalties import length_penalty
from mma_nmt.decoding.search import Hypothesis, SearchConfig, SpecialIds, _step_log_probs, output_limits
from mma_nmt.models.incremental import reorder_incremental_state

NEG_INF = float("-inf")


class FinishedBeams:
    """Up to K finished hypotheses per sentence, in the order they finished, on the device: ``tokens`` (B, K, L) the
    prefixes (BOS and EOS left out), ``lengths`` (B, K) their lengths, ``scores`` (B, K) their summed
    log-probabilities (EOS included), ``count`` (B,) how many each sentence holds. L is the longest output."""

    def __init__(self, batch: int, beam: int, max_len: int, device: torch.device):
        self.beam = beam
        self.tokens = torch.zeros(batch, beam, max_len, dtype=torch.long, device=device)
        self.lengths = torch.zeros(batch, beam, dtype=torch.long, device=device)
        self.scores = torch.zeros(batch, beam, device=device)
        self.count = torch.zeros(batch, dtype=torch.long, device=device)
        self.slots = torch.arange(beam, device=device)  # (K,)

    def done(self) -> torch.Tensor:
        """(B,) bool: the sentences holding K finished hypotheses."""
        return self.count >= self.beam

    def add(self, ends: torch.Tensor, scores: torch.Tensor, rows: torch.Tensor, tokens: torch.Tensor) -> None:
        """Finishes the candidates of ``ends`` (B, C) bool, in rank order, while their sentence holds fewer than K:
        candidate (b, c) ends beam row ``rows[b, c]`` of ``tokens`` (N, 1 + step) with summed log-probability
        ``scores[b, c]``."""
        taken = ends.cumsum(1)  # (B, C): the finishes up to each candidate, itself included
        ends = ends & (self.count.unsqueeze(1) + taken <= self.beam)
        slot = self.count.unsqueeze(1) + taken - 1  # (B, C): the slot each finish fills
        # (B, K, C): candidate c fills slot j; at most one per slot
        fills = ends.unsqueeze(1) & (slot.unsqueeze(1) == self.slots.view(1, -1, 1))
        filled = fills.any(dim=2)  # (B, K)
        source = fills.int().argmax(dim=2)  # (B, K): the candidate filling each slot (0 where none)
        step = tokens.shape[1] - 1
        prefixes = tokens[:, 1:].index_select(0, rows.gather(1, source).view(-1))  # (B K, step)
        prefixes = prefixes.view(*filled.shape, step)  # (B, K, step)
        self.tokens[:, :, :step] = torch.where(filled.unsqueeze(2), prefixes, self.tokens[:, :, :step])
        self.lengths = torch.where(filled, step, self.lengths)
        self.scores = torch.where(filled, scores.gather(1, source), self.scores)
        self.count = self.count + ends.sum(dim=1)

    def hypotheses(self, config: SearchConfig) -> list[list[Hypothesis]]:
        """Each sentence's finished hypotheses, best first by length-normalised score (ties in finishing order); one
        read of the device."""
        penalty = length_penalty(config.length_penalty)
        count, lengths = self.count.tolist(), self.lengths.tolist()
        scores, tokens = self.scores.tolist(), self.tokens.tolist()
        results = []
        for b, held in enumerate(count):
            hyps = [Hypothesis(tokens[b][j][:lengths[b][j]], scores[b][j],
                               scores[b][j] / penalty(lengths[b][j] + 1, config.alpha)) for j in range(held)]
            results.append(sorted(hyps, key=lambda h: h.normalized, reverse=True))
        return results


def next_beams(goes_on: torch.Tensor, scores: torch.Tensor, rows: torch.Tensor, tokens: torch.Tensor, *,
               beam: int, first_rows: torch.Tensor, eos: int):
    """The K beams of each sentence after a step: the first K candidates of ``goes_on`` (B, C) bool in rank order,
    then dead beams (score -inf, the sentence's first row, EOS) where fewer go on. ``scores``, ``rows``, ``tokens``
    (B, C) describe the candidates, ``first_rows`` (B, 1) each sentence's row 0. Returns scores (B, K), the rows the
    beams continue (B K,) and their new tokens (B K,)."""
    rank = torch.arange(goes_on.shape[1], device=goes_on.device)  # (C,)
    # (B, K): the candidates that go on in rank order, then the others; the first K are the beams
    pick = torch.where(goes_on, rank, rank + goes_on.shape[1]).argsort(dim=1)[:, :beam]
    kept = goes_on.gather(1, pick)
    new_scores = torch.where(kept, scores.gather(1, pick), NEG_INF)
    order = torch.where(kept, rows.gather(1, pick), first_rows).view(-1)
    new_tokens = torch.where(kept, tokens.gather(1, pick), eos).view(-1)
    return new_scores, order, new_tokens


@torch.no_grad()
def beam_search(model, src: torch.Tensor, src_lengths: torch.Tensor, config: SearchConfig,
                ids: SpecialIds = SpecialIds()) -> list[list[Hypothesis]]:
    """Batched beam search. src (B, S), src_lengths (B,) -> per sentence up to ``beam_size`` hypotheses, best first.

    A sentence stops when K hypotheses have finished (EOS among the top K candidates of a step); at its maximum length
    only EOS is allowed."""
    batch, beam, device = src.shape[0], config.beam_size, src.device
    limits = output_limits(model, src_lengths.tolist(), config)
    rows = torch.arange(batch, device=device).repeat_interleave(beam)  # (B K,)
    encoder_out = model.encode(src, src_lengths).index_select(rows)
    tokens = torch.full((batch * beam, 1), ids.bos, dtype=torch.long, device=device)
    scores = torch.full((batch, beam), NEG_INF, device=device)
    scores[:, 0] = 0.0  # one live beam per sentence at the start
    first_rows = torch.arange(batch, device=device).unsqueeze(1) * beam  # (B, 1)
    finished, state = FinishedBeams(batch, beam, max(limits), device), {}
    limit_rows = torch.tensor(limits, device=device).repeat_interleave(beam)
    for step in range(max(limits)):
        log_probs = _step_log_probs(model, tokens, encoder_out, state, ids=ids, step=step, config=config,
                                    forced_eos=limit_rows <= step + 1)
        vocab = log_probs.shape[1]
        candidates = (scores.view(-1, 1) + log_probs).view(batch, beam * vocab)  # (B, K V)
        top_scores, top_index = candidates.topk(min(2 * beam, beam * vocab), dim=1)  # (B, C), best first
        top_rows, top_tokens = first_rows + top_index // vocab, top_index % vocab
        # the walk of a sentence stops at its first -inf candidate; a sentence with K finished takes none
        live = (top_scores != NEG_INF) & ~finished.done().unsqueeze(1)
        is_eos = top_tokens == ids.eos
        top_k = torch.arange(top_scores.shape[1], device=device) < beam  # (C,)
        finished.add(live & is_eos & top_k, top_scores, top_rows, tokens)
        scores, order, new_tokens = next_beams(live & ~is_eos, top_scores, top_rows, top_tokens, beam=beam,
                                               first_rows=first_rows, eos=ids.eos)
        if bool(finished.done().all()):  # the step's one host read
            break
        tokens = torch.cat([tokens.index_select(0, order), new_tokens.unsqueeze(1)], dim=1)
        reorder_incremental_state(state, order)
    return finished.hypotheses(config)
