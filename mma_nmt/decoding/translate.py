"""Translating a prepared split (or raw sentences) with greedy or beam search."""

from __future__ import annotations

import warnings

import torch

from mma_nmt.data.batch import pad_sequences
from mma_nmt.decoding.compiled_search import apply_search_compile
from mma_nmt.decoding.search import (Hypothesis, SearchConfig, SpecialIds, check_nbest, output_limits,
                                    search_nbest)


def special_ids(tokenizer) -> SpecialIds:
    return SpecialIds(pad=tokenizer.pad_id, bos=tokenizer.bos_id, eos=tokenizer.eos_id)


def translate_ids(model, sources: list[torch.Tensor], config: SearchConfig, ids: SpecialIds, *,
                  device: torch.device | str = "cpu", progress: bool = False) -> list[Hypothesis]:
    """Best hypothesis per source (1-d id tensors without specials), in input order; batches of similar length.
    An empty source gets an empty hypothesis without running the model (:data:`EMPTY_LINE_POLICY`). A source longer
    than the model's ``max_positions`` fails naming it (``config.too_long = "fail"``) or is cut to that length with a
    warning (``"truncate"``). ``progress``: a tqdm bar counting sentences (on a terminal only)."""
    return [hyps[0] for hyps in translate_ids_nbest(model, sources, config, ids, device=device, progress=progress)]


@torch.no_grad()
def translate_ids_nbest(model, sources: list[torch.Tensor], config: SearchConfig, ids: SpecialIds, *, nbest: int = 1,
                        device: torch.device | str = "cpu", progress: bool = False) -> list[list[Hypothesis]]:
    """:func:`translate_ids` with the ``nbest`` best hypotheses of each source, best first (an empty source: one
    empty hypothesis of score 0)."""
    from tqdm import tqdm

    check_nbest(nbest, config)
    apply_search_compile(model, config.compile)
    model.eval()
    sources = fit_sources(sources, _source_limit(model), config.too_long)
    results: list[list[Hypothesis] | None] = [None] * len(sources)
    for i in empty_sources(sources):
        results[i] = [Hypothesis(tokens=[], score=0.0, normalized=0.0)]
    order = sorted((i for i in range(len(sources)) if results[i] is None), key=lambda i: len(sources[i]))
    output_limits(model, [len(sources[i]) for i in order], config, labels=[f"line {i + 1}" for i in order])
    bar = tqdm(total=len(sources), desc="translating", unit=" sent", leave=False, disable=None if progress else True)
    bar.update(len(sources) - len(order))
    for start in range(0, len(order), config.batch_size):
        chunk = order[start:start + config.batch_size]
        src, lengths = pad_sequences([sources[i] for i in chunk], pad_id=ids.pad)
        for i, hyps in zip(chunk, search_nbest(model, src.to(device), lengths.to(device), config, ids, nbest)):
            results[i] = hyps
        bar.update(len(chunk))
    bar.close()
    return results


EMPTY_LINE_POLICY = ("an empty or whitespace-only source line is translated to an empty line (as the Moses decoder "
                     "does): the output keeps one line per input line, and the number of such lines is reported")


def empty_sources(sources: list[torch.Tensor]) -> list[int]:
    """Indices of the sources without a token (blank lines): :data:`EMPTY_LINE_POLICY` applies to them."""
    return [i for i, source in enumerate(sources) if len(source) == 0]


def blank_lines(texts: list[str]) -> list[int]:
    """Indices of the empty or whitespace-only ``texts``: they are not encoded (:data:`EMPTY_LINE_POLICY`)."""
    return [i for i, text in enumerate(texts) if not text.strip()]


def _source_limit(model) -> int | None:
    """The longest source the model's encoder has positions for (None: no limit)."""
    config = getattr(model, "config", None)
    if not getattr(getattr(config, "encoder", None), "positional_embedding", True):
        return None
    return getattr(config, "max_positions", None)


def fit_sources(sources: list[torch.Tensor], max_positions: int | None, policy: str) -> list[torch.Tensor]:
    """``sources`` with those longer than ``max_positions`` tokens refused (ValueError naming the 1-based line) or,
    with ``policy="truncate"``, cut to ``max_positions`` tokens with one warning naming them."""
    if max_positions is None:
        return sources
    long = [i for i, source in enumerate(sources) if len(source) > max_positions]
    if not long:
        return sources
    lines = ", ".join(f"{i + 1} ({len(sources[i])} tokens)" for i in long[:10]) + (" ..." if len(long) > 10 else "")
    if policy != "truncate":
        raise ValueError(f"{len(long)} source line(s) longer than the model's max_positions={max_positions} subword "
                         f"tokens: line {lines}; shorten them, or set decode.too_long=truncate to cut them")
    warnings.warn(f"{len(long)} source line(s) cut to the model's max_positions={max_positions} subword tokens: "
                  f"line {lines}", stacklevel=3)
    return [source[:max_positions] for source in sources]


def translate_dataset(model, dataset, config: SearchConfig, *, device="cpu", limit: int | None = None) -> list[str]:
    """Detokenised (SentencePiece-decoded) translations of the first ``limit`` sentences of a ParallelDataset."""
    sources = dataset.src[:limit] if limit else dataset.src
    hyps = translate_ids(model, list(sources), config, special_ids(dataset.tgt_tokenizer), device=device)
    return [dataset.tgt_tokenizer.decode(h.tokens) for h in hyps]


def translate_texts(model, texts: list[str], config: SearchConfig, *, src_tokenizer, tgt_tokenizer,
                    device="cpu", progress: bool = False) -> list[str]:
    """Translations of source sentences already word-level preprocessed as the corpus (SentencePiece-encoded here,
    decoded back to text, no postprocessing), one per text: an empty or whitespace-only text gives an empty line
    (:data:`EMPTY_LINE_POLICY`; :func:`blank_lines` counts them). For raw text use :class:`mma_nmt.Translator`,
    which applies the corpus's preprocessing and postprocessing."""
    blank = set(blank_lines(texts))
    sources = [torch.tensor([] if i in blank else src_tokenizer.encode(text), dtype=torch.long)
               for i, text in enumerate(texts)]
    hyps = translate_ids(model, sources, config, special_ids(tgt_tokenizer), device=device, progress=progress)
    return [tgt_tokenizer.decode(h.tokens) for h in hyps]
