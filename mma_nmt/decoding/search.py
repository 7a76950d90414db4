"""Greedy and batched beam search over any model with the incremental contract of ``mma_nmt.models.incremental``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch.nn import functional as F

from mma_nmt.config_io import check_choices, require_at_least
from mma_nmt.config_types import CompileMode
from mma_nmt.decoding.penalties import LengthPenalty, length_penalty, max_lengths


@dataclass
class SearchConfig:
    beam_size: int = 5  # 1 = greedy
    length_penalty: LengthPenalty = "fairseq"  # "fairseq": length ** alpha (see decoding.penalties)
    alpha: float = 1.0
    max_len_a: float = 1.2  # maximum output length a * src_len + b (EOS included; see output_limits)
    max_len_b: int = 10
    min_len: int = 1  # EOS is forbidden before this many tokens; at most the output limit (refused otherwise)
    batch_size: int = 64  # sentences per batch when translating a corpus
    # a source longer than the model's max_positions: "fail" (naming it) | "truncate" (warning)
    too_long: Literal["fail", "truncate"] = "fail"
    # the LSTM's decoder step through torch.compile in this mode (false: eager); "reduce-overhead" replays it as CUDA
    # graphs on a GPU. Other models refuse it: their incremental step grows (mma_nmt.decoding.compiled_search)
    compile: CompileMode = False

    def __post_init__(self):
        check_choices("decode", self)
        require_at_least("decode", self, beam_size=1, batch_size=1, alpha=0.0, max_len_a=0.0, max_len_b=0, min_len=0)
        if self.max_len_a == 0 and self.min_len > max(1, self.max_len_b):
            raise ValueError(f"decode.min_len={self.min_len} can never be met: with decode.max_len_a=0 every output "
                             f"ends by decode.max_len_b={self.max_len_b} tokens (EOS included); lower decode.min_len "
                             f"or raise decode.max_len_b")


def check_min_len_fits(config: SearchConfig, max_positions: int | None) -> None:
    """Refuses (ValueError) a ``decode.min_len`` that no sentence can reach: outputs end by ``max_positions - 1``
    tokens (EOS included), whatever the source length."""
    if max_positions is not None and config.min_len > max_positions - 1:
        raise ValueError(f"decode.min_len={config.min_len} can never be met: the model's max_positions="
                         f"{max_positions} ends every output by {max_positions - 1} tokens (EOS included); lower "
                         f"decode.min_len")


def output_limits(model, src_lengths: list[int], config: SearchConfig, labels: list[str] | None = None) -> list[int]:
    """Maximum output length per sentence (EOS included): ``floor(max_len_a * src_len + max_len_b)``, at most the
    model's ``max_positions - 1``. Refuses (ValueError) sentences whose limit is below ``decode.min_len``, naming the
    first of them by ``labels`` (default: "sentence <i> of the batch")."""
    cap = _cap(model)
    limits = max_lengths(src_lengths, config.max_len_a, config.max_len_b, cap)
    short = [i for i, limit in enumerate(limits) if limit < config.min_len]
    if short:
        i = short[0]
        label = labels[i] if labels else f"sentence {i} of the batch"
        capped = f", at most max_positions - 1 = {cap}" if cap is not None else ""
        raise ValueError(f"decode.min_len={config.min_len} cannot be met for {len(short)} sentence(s), first {label} "
                         f"({src_lengths[i]} source tokens): its output limit is {limits[i]} tokens (decode.max_len_a="
                         f"{config.max_len_a:g} x {src_lengths[i]} + decode.max_len_b={config.max_len_b}{capped}); "
                         f"lower decode.min_len or raise decode.max_len_a / max_len_b")
    return limits


@dataclass
class Hypothesis:
    tokens: list[int]  # without BOS and EOS
    score: float  # summed log-probability, EOS included
    normalized: float  # score / length penalty


@dataclass
class SpecialIds:
    pad: int = 0
    bos: int = 1
    eos: int = 2


def _step_log_probs(model, tokens, encoder_out, state, *, ids: SpecialIds, step: int, config: SearchConfig,
                    forced_eos: torch.Tensor) -> torch.Tensor:
    """Log-probabilities (N, V) of the next token after ``tokens`` (N, step+1) with the search's constraints.

    The per-step code of both searches: it reads no tensor value on the host (no ``.item()``, no branch on a tensor,
    no boolean-mask indexing) and keeps the shapes of every step, so that it can be compiled whole
    (``torch.compile(fullgraph=True)``) or captured in a CUDA graph with the model's incremental step."""
    logits, _ = model.decode(tokens, encoder_out, state)
    return constrain_log_probs(logits[:, -1], ids=ids, forced_eos=forced_eos, eos_allowed=step + 1 >= config.min_len)


def constrain_log_probs(logits: torch.Tensor, *, ids: SpecialIds, forced_eos: torch.Tensor,
                        eos_allowed: bool = True) -> torch.Tensor:
    """logits (N, V) -> float32 log-probabilities (N, V) where PAD and BOS are impossible, EOS too unless
    ``eos_allowed``, and the rows of ``forced_eos`` (N,) bool (at their maximum length) may only end: every token but
    EOS is impossible there. Without host synchronisation: the forced rows are a mask, not a branch."""
    log_probs = F.log_softmax(logits.float(), dim=-1)  # (N, V)
    vocab = torch.arange(log_probs.shape[-1], device=log_probs.device)  # (V,)
    banned = (vocab == ids.pad) | (vocab == ids.bos)
    if not eos_allowed:  # a Python bool (the step number against decode.min_len), not a tensor value
        banned = banned | (vocab == ids.eos)
    not_eos = vocab != ids.eos
    # (N, V): the banned columns of every row, and every column but EOS of a forced row
    impossible = banned.unsqueeze(0) | (forced_eos.to(log_probs.device).unsqueeze(1) & not_eos.unsqueeze(0))
    return log_probs.masked_fill(impossible, float("-inf"))


@torch.no_grad()
def greedy_search(model, src: torch.Tensor, src_lengths: torch.Tensor, config: SearchConfig,
                  ids: SpecialIds = SpecialIds()) -> list[Hypothesis]:
    """src (B, S), src_lengths (B,) -> one hypothesis per sentence: the argmax token at every step."""
    batch = src.shape[0]
    limits = output_limits(model, src_lengths.tolist(), config)
    limit_rows = torch.tensor(limits, device=src.device)  # (B,), moved once
    encoder_out = model.encode(src, src_lengths)
    tokens = torch.full((batch, 1), ids.bos, dtype=torch.long, device=src.device)
    scores = torch.zeros(batch, device=src.device)
    finished = torch.zeros(batch, dtype=torch.bool, device=src.device)
    lengths = torch.zeros(batch, dtype=torch.long, device=src.device)
    state: dict = {}
    for step in range(max(limits)):
        log_probs = _step_log_probs(model, tokens, encoder_out, state, ids=ids, step=step, config=config,
                                    forced_eos=limit_rows <= step + 1)
        best, token = log_probs.max(dim=-1)  # (B,)
        token = token.masked_fill(finished, ids.pad)
        scores += best.masked_fill(finished, 0.0)
        lengths += (~finished).long()
        tokens = torch.cat([tokens, token.unsqueeze(1)], dim=1)
        finished |= token == ids.eos
        if finished.all():  # the search's one host read per step (stopping early), outside the step
            break
    penalty = length_penalty(config.length_penalty)
    out = []
    # one read of the device for the whole batch
    for row, n, score in zip(tokens[:, 1:].tolist(), lengths.tolist(), scores.tolist(), strict=True):
        body = [t for t in row if t not in (ids.eos, ids.pad)]
        out.append(Hypothesis(body, score, score / penalty(n, config.alpha)))
    return out


def _cap(model) -> int | None:
    positions = getattr(getattr(model, "config", None), "max_positions", None)
    return positions - 1 if positions else None


def search(model, src, src_lengths, config: SearchConfig, ids: SpecialIds = SpecialIds()) -> list[Hypothesis]:
    """The best hypothesis per sentence: greedy search for ``beam_size == 1``, beam search otherwise."""
    return [hyps[0] for hyps in search_nbest(model, src, src_lengths, config, ids)]


def check_nbest(nbest: int, config: SearchConfig) -> None:
    """Refuses (ValueError) an ``nbest`` that the search cannot give: beam search finds at most ``beam_size``."""
    if nbest < 1 or nbest > config.beam_size:
        raise ValueError(f"nbest={nbest} needs 1 <= nbest <= decode.beam_size={config.beam_size} (beam search keeps "
                         f"beam_size hypotheses per sentence); raise the beam size (--beam, decode.beam_size)")


def search_nbest(model, src, src_lengths, config: SearchConfig, ids: SpecialIds = SpecialIds(),
                 nbest: int = 1) -> list[list[Hypothesis]]:
    """The ``nbest`` best hypotheses per sentence, best first (by length-normalised score): greedy search for
    ``beam_size == 1``, beam search otherwise. A sentence may get fewer when fewer than ``nbest`` finished."""
    from mma_nmt.decoding.beam import beam_search  # beam.py builds on this module

    check_nbest(nbest, config)
    if config.beam_size == 1:
        return [[hyp] for hyp in greedy_search(model, src, src_lengths, config, ids)]
    return [hyps[:nbest] for hyps in beam_search(model, src, src_lengths, config, ids)]
