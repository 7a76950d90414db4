"""Translating a prepared split (or raw sentences) with greedy or beam search."""

from __future__ import annotations

import torch

from mma_nmt.data.batch import pad_sequences
from mma_nmt.decoding.search import Hypothesis, SearchConfig, SpecialIds, search


def special_ids(tokenizer) -> SpecialIds:
    return SpecialIds(pad=tokenizer.pad_id, bos=tokenizer.bos_id, eos=tokenizer.eos_id)


@torch.no_grad()
def translate_ids(model, sources: list[torch.Tensor], config: SearchConfig, ids: SpecialIds, *,
                  device: torch.device | str = "cpu", progress: bool = False) -> list[Hypothesis]:
    """Best hypothesis per source (1-d id tensors without specials), in input order; batches of similar length.
    ``progress``: a tqdm bar counting sentences (on a terminal only)."""
    from tqdm import tqdm

    model.eval()
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    results: list[Hypothesis | None] = [None] * len(sources)
    bar = tqdm(total=len(sources), desc="translating", unit=" sent", leave=False, disable=None if progress else True)
    for start in range(0, len(order), config.batch_size):
        chunk = order[start:start + config.batch_size]
        src, lengths = pad_sequences([sources[i] for i in chunk], pad_id=ids.pad)
        if src.shape[1] == 0:  # only empty sources: one padding position to attend to
            src = torch.full((len(chunk), 1), ids.pad, dtype=torch.long)
        lengths = lengths.clamp(min=1)  # an empty source is read as one padding token
        for i, hyp in zip(chunk, search(model, src.to(device), lengths.to(device), config, ids)):
            results[i] = hyp
        bar.update(len(chunk))
    bar.close()
    return results


def translate_dataset(model, dataset, config: SearchConfig, *, device="cpu", limit: int | None = None) -> list[str]:
    """Detokenised (SentencePiece-decoded) translations of the first ``limit`` sentences of a ParallelDataset."""
    sources = dataset.src[:limit] if limit else dataset.src
    hyps = translate_ids(model, list(sources), config, special_ids(dataset.tgt_tokenizer), device=device)
    return [dataset.tgt_tokenizer.decode(h.tokens) for h in hyps]


def translate_texts(model, texts: list[str], config: SearchConfig, *, src_tokenizer, tgt_tokenizer,
                    device="cpu", progress: bool = False) -> list[str]:
    """Translations of raw source sentences (SentencePiece-encoded here, decoded back to text)."""
    sources = [torch.tensor(src_tokenizer.encode(text), dtype=torch.long) for text in texts]
    hyps = translate_ids(model, sources, config, special_ids(tgt_tokenizer), device=device, progress=progress)
    return [tgt_tokenizer.decode(h.tokens) for h in hyps]
