"""The beam search's walk written plainly, one sentence and one candidate at a time on the host, as the library ran it
until 2026-12-03: the reference that ``mma_nmt.decoding.beam`` (the same walk as tensors on the device) must equal,
hypothesis for hypothesis and score for score (``tests/python/decoding/test_decode_beam_device.py``), and the
baseline of ``benchmarks.beam_bookkeeping``."""

from __future__ import annotations

import torch

from mma_nmt.decoding.penalties import length_penalty
from mma_nmt.decoding.search import Hypothesis, SearchConfig, SpecialIds, _step_log_probs, output_limits
from mma_nmt.models.incremental import reorder_incremental_state


class _BeamBook:
    """Finished hypotheses of each sentence; a sentence is done once it holds ``beam_size`` of them."""

    def __init__(self, batch: int, config: SearchConfig):
        self.config = config
        self.penalty = length_penalty(config.length_penalty)
        self.finished: list[list[Hypothesis]] = [[] for _ in range(batch)]

    def done(self, b: int) -> bool:
        return len(self.finished[b]) >= self.config.beam_size

    def add(self, b: int, prefix: list[int], score: float) -> None:
        length = len(prefix) + 1  # with EOS
        self.finished[b].append(Hypothesis(prefix, score, score / self.penalty(length, self.config.alpha)))

    def best(self) -> list[list[Hypothesis]]:
        return [sorted(hyps, key=lambda h: h.normalized, reverse=True) for hyps in self.finished]


def _select(book: _BeamBook, b: int, cand_scores, cand_beams, cand_tokens, tokens, *, beam: int, eos: int):
    """Walks sentence b's 2K best candidates in order: EOS among the top K finishes a hypothesis, the first K non-EOS
    continue. Returns K (score, source row, token) triples, padded with dead (-inf) slots."""
    keep = []
    for rank in range(cand_scores.shape[0]):
        score = float(cand_scores[rank])
        if score == float("-inf") or len(keep) == beam:
            break
        row, token = b * beam + int(cand_beams[rank]), int(cand_tokens[rank])
        if token == eos:
            if rank < beam and not book.done(b):
                book.add(b, tokens[row, 1:].tolist(), score)
        else:
            keep.append((score, row, token))
    while len(keep) < beam:
        keep.append((float("-inf"), b * beam, eos))
    return keep


@torch.no_grad()
def beam_search_reference(model, src: torch.Tensor, src_lengths: torch.Tensor, config: SearchConfig,
                ids: SpecialIds = SpecialIds()) -> list[list[Hypothesis]]:
    """Batched beam search. src (B, S), src_lengths (B,) -> per sentence up to ``beam_size`` hypotheses, best first.

    Rows are sentence-major: row ``b * K + k`` is beam k of sentence b. A sentence stops when K hypotheses have
    finished (EOS among the top K candidates of a step); at its maximum length only EOS is allowed."""
    batch, beam, device = src.shape[0], config.beam_size, src.device
    limits = output_limits(model, src_lengths.tolist(), config)
    rows = torch.arange(batch, device=device).repeat_interleave(beam)  # (B*K,)
    encoder_out = model.encode(src, src_lengths).index_select(rows)
    tokens = torch.full((batch * beam, 1), ids.bos, dtype=torch.long, device=device)
    scores = torch.full((batch, beam), float("-inf"), device=device)
    scores[:, 0] = 0.0  # one live beam per sentence at the start
    book, state = _BeamBook(batch, config), {}
    limit_rows = torch.tensor(limits, device=device).repeat_interleave(beam)
    for step in range(max(limits)):
        log_probs = _step_log_probs(model, tokens, encoder_out, state, ids=ids, step=step, config=config,
                                    forced_eos=limit_rows <= step + 1)
        vocab = log_probs.shape[1]
        candidates = (scores.view(-1, 1) + log_probs).view(batch, beam * vocab)  # (B, K*V)
        top_scores, top_index = candidates.topk(min(2 * beam, beam * vocab), dim=1)  # (B, 2K)
        top_scores, top_beams, top_tokens = top_scores.cpu(), (top_index // vocab).cpu(), (top_index % vocab).cpu()
        chosen = []
        for b in range(batch):
            if book.done(b):
                chosen += [(float("-inf"), b * beam, ids.eos)] * beam
            else:
                chosen += _select(book, b, top_scores[b], top_beams[b], top_tokens[b], tokens, beam=beam, eos=ids.eos)
        if all(book.done(b) for b in range(batch)):
            break
        order = torch.tensor([row for _, row, _ in chosen], device=device)
        scores = torch.tensor([s for s, _, _ in chosen], device=device).view(batch, beam)
        new_tokens = torch.tensor([t for _, _, t in chosen], device=device).view(-1, 1)
        tokens = torch.cat([tokens.index_select(0, order), new_tokens], dim=1)
        reorder_incremental_state(state, order)
    return book.best()
