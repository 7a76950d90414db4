"""A binarised split written by :func:`mma_nmt.data.prepare.prepare`, and the batching around it.

Files of a split in the prepared directory: ``<split>.src.pt`` / ``<split>.tgt.pt`` (token ids, see :func:`save_ids`)
and ``<split>.src.txt`` / ``<split>.tgt.txt`` (the raw reference text of the same examples, one per line).
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader

from mma_nmt.data.batch import Batch, Collater, collate, pad_sequences  # noqa: F401  (re-exported)
from mma_nmt.data.fileio import atomic_torch_save
from mma_nmt.data.sampler import TokenBatchSampler  # noqa: F401  (re-exported)
from mma_nmt.data.tokenizer import Tokenizer

__all__ = ["ParallelDataset", "TokenBatchSampler", "Batch", "Collater", "collate", "pad_sequences", "make_loader",
           "save_ids", "load_ids", "read_text_lines"]
IDS_FORMAT_VERSION = 1


def save_ids(path: str | os.PathLike, sequences: Sequence[Sequence[int]]) -> Path:
    """Writes token-id sequences as one flat int32 tensor plus int64 offsets (``offsets[i]:offsets[i+1]`` is example
    ``i``), atomically."""
    lengths = torch.tensor([len(seq) for seq in sequences], dtype=torch.int64)
    offsets = torch.zeros(len(sequences) + 1, dtype=torch.int64)
    torch.cumsum(lengths, dim=0, out=offsets[1:])
    flat = torch.from_numpy(np.fromiter(itertools.chain.from_iterable(sequences), dtype=np.int32,
                                        count=int(offsets[-1])))
    return atomic_torch_save(path, {"version": IDS_FORMAT_VERSION, "ids": flat, "offsets": offsets})


def load_ids(path: str | os.PathLike) -> list[torch.Tensor]:
    """Reads :func:`save_ids` output as a list of int64 tensors (views into one flat tensor)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: binarised split missing (run mma_nmt.data.prepare.prepare first)")
    data = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(data, dict) or data.get("version") != IDS_FORMAT_VERSION:
        raise ValueError(f"{path}: not a binarised split of format version {IDS_FORMAT_VERSION}")
    flat, offsets = data["ids"].to(torch.int64), data["offsets"]
    return list(torch.split(flat, torch.diff(offsets).tolist()))


def read_text_lines(path: str | os.PathLike) -> list[str]:
    """One string per line of a UTF-8 file written by the prepare step (split on ``\\n`` only)."""
    text = Path(path).read_text(encoding="utf-8")
    return text.split("\n")[:-1] if text else []


class ParallelDataset(torch.utils.data.Dataset):
    """One binarised split: ``src[i]``/``tgt[i]`` are int64 ids without specials, ``src_text[i]``/``tgt_text[i]``
    the raw reference text, ``src_tokenizer``/``tgt_tokenizer`` the SentencePiece models, ``meta`` the prepare
    record (``meta.json``; empty when missing)."""

    def __init__(self, src: list[torch.Tensor], tgt: list[torch.Tensor], *, src_text: list[str], tgt_text: list[str],
                 src_tokenizer: Tokenizer, tgt_tokenizer: Tokenizer, split: str = "", meta: dict | None = None):
        if not len(src) == len(tgt) == len(src_text) == len(tgt_text):
            raise ValueError(f"split {split!r}: {len(src)} src, {len(tgt)} tgt, {len(src_text)} src_text and "
                             f"{len(tgt_text)} tgt_text entries; the prepared files do not belong together")
        self.src, self.tgt = src, tgt
        self.src_text, self.tgt_text = src_text, tgt_text
        self.src_tokenizer, self.tgt_tokenizer = src_tokenizer, tgt_tokenizer
        self.split = split
        self.meta = meta or {}

    @classmethod
    def load(cls, prepared_dir: str | os.PathLike, split: str) -> "ParallelDataset":
        """Loads ``split`` (e.g. ``"train"``, ``"valid"``, ``"test"``) from a directory written by ``prepare``."""
        root = Path(prepared_dir)
        meta_path = root / "meta.json"
        meta = json.loads(meta_path.read_text(encoding="utf-8")) if meta_path.is_file() else {}
        if meta and split not in meta.get("splits", {}):
            raise KeyError(f"{root}: no prepared split {split!r}; prepared splits: {sorted(meta.get('splits', {}))}")
        return cls(load_ids(root / f"{split}.src.pt"), load_ids(root / f"{split}.tgt.pt"),
                   src_text=read_text_lines(root / f"{split}.src.txt"),
                   tgt_text=read_text_lines(root / f"{split}.tgt.txt"),
                   src_tokenizer=Tokenizer.load(root / "spm_src.model"),
                   tgt_tokenizer=Tokenizer.load(root / "spm_tgt.model"), split=split, meta=meta)

    def __len__(self) -> int:
        return len(self.src)

    def __getitem__(self, index: int) -> dict:
        return {"index": index, "src": self.src[index], "tgt": self.tgt[index]}

    @property
    def src_lengths(self) -> list[int]:
        return [len(ids) for ids in self.src]

    @property
    def tgt_lengths(self) -> list[int]:
        return [len(ids) for ids in self.tgt]

    def batch_sampler(self, *, max_tokens: int, shuffle: bool = True, seed: int = 0, max_len: int | None = None,
                      num_replicas: int = 1, rank: int = 0, length_multiple: int = 1) -> TokenBatchSampler:
        """A :class:`TokenBatchSampler` over this split's lengths."""
        return TokenBatchSampler(self.src_lengths, self.tgt_lengths, max_tokens=max_tokens, shuffle=shuffle,
                                 seed=seed, max_len=max_len, num_replicas=num_replicas, rank=rank,
                                 length_multiple=length_multiple)


def make_loader(dataset: ParallelDataset, sampler: TokenBatchSampler, *, num_workers: int = 0,
                pin_memory: bool = False) -> DataLoader:
    """A DataLoader yielding :class:`Batch` objects in ``sampler``'s order, padded to its ``length_multiple``.

    With ``num_workers > 0`` the sampler runs ahead of the consumer: save ``sampler.state_dict(batches_consumed=n)``.
    """
    collater = Collater(dataset, sampler.length_multiple)
    return DataLoader(range(len(dataset)), batch_sampler=sampler, collate_fn=collater, num_workers=num_workers,
                      pin_memory=pin_memory)
