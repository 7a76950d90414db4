"""Translating a prepared split (or raw sentences) with greedy or beam search."""

from __future__ import annotations

import torch

from mma_nmt.decoding.search import Hypothesis, SearchConfig, SpecialIds, search


def special_ids(tokenizer) -> SpecialIds:
    return SpecialIds(pad=tokenizer.pad_id, bos=tokenizer.bos_id, eos=tokenizer.eos_id)


def pad_batch(sequences: list[torch.Tensor], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded (B, S) ids and (B,) lengths from a list of 1-d id tensors."""
    lengths = torch.tensor([max(1, len(s)) for s in sequences])
    out = torch.full((len(sequences), int(lengths.max())), pad_id, dtype=torch.long)
    for i, seq in enumerate(sequences):
        out[i, : len(seq)] = seq
    return out, lengths


@torch.no_grad()
def translate_ids(model, sources: list[torch.Tensor], config: SearchConfig, ids: SpecialIds, *,
                  device: torch.device | str = "cpu") -> list[Hypothesis]:
    """Best hypothesis per source (1-d id tensors without specials), in input order; batches of similar length."""
    model.eval()
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    results: list[Hypothesis | None] = [None] * len(sources)
    for start in range(0, len(order), config.batch_size):
        chunk = order[start:start + config.batch_size]
        src, lengths = pad_batch([sources[i] for i in chunk], ids.pad)
        for i, hyp in zip(chunk, search(model, src.to(device), lengths.to(device), config, ids)):
            results[i] = hyp
    return results


def translate_dataset(model, dataset, config: SearchConfig, *, device="cpu", limit: int | None = None) -> list[str]:
    """Detokenised (SentencePiece-decoded) translations of the first ``limit`` sentences of a ParallelDataset."""
    sources = dataset.src[:limit] if limit else dataset.src
    hyps = translate_ids(model, list(sources), config, special_ids(dataset.tgt_tokenizer), device=device)
    return [dataset.tgt_tokenizer.decode(h.tokens) for h in hyps]
