"""Padded batches for sequence-to-sequence training."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, fields

import torch

from mma_nmt.data.sampler import round_up
from mma_nmt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID


@dataclass
class Batch:
    """A padded batch (all int64, right-padded with ``pad_id = 0``).

    Attributes:
        src: ``(B, S)`` source ids, no BOS/EOS.
        src_lengths: ``(B,)`` source lengths.
        tgt_in: ``(B, T)`` decoder input, ``bos + tgt``.
        tgt_out: ``(B, T)`` decoder target, ``tgt + eos``.
        tgt_lengths: ``(B,)`` target lengths including the added BOS (for ``tgt_in``) or EOS (for ``tgt_out``):
            ``len(tgt) + 1``.
        indices: ``(B,)`` the examples' indices in the dataset (to match outputs with references).
    """

    src: torch.Tensor
    src_lengths: torch.Tensor
    tgt_in: torch.Tensor
    tgt_out: torch.Tensor
    tgt_lengths: torch.Tensor
    indices: torch.Tensor

    def to(self, device: torch.device | str, non_blocking: bool = False, keep_on_host: Collection[str] = ()) -> "Batch":
        """A copy with every tensor on ``device``, but the fields named in ``keep_on_host``, which stay as they are."""
        unknown = set(keep_on_host) - {f.name for f in fields(self)}
        if unknown:
            raise ValueError(f"Batch.to: keep_on_host names no field of a Batch: {sorted(unknown)}")
        return Batch(**{f.name: getattr(self, f.name) if f.name in keep_on_host
                        else getattr(self, f.name).to(device, non_blocking=non_blocking) for f in fields(self)})

    def pin_memory(self) -> "Batch":
        """Used by ``DataLoader(pin_memory=True)``."""
        return Batch(**{f.name: getattr(self, f.name).pin_memory() for f in fields(self)})

    @property
    def num_tokens(self) -> int:
        """Non-pad target tokens (``tgt_out`` positions that carry a loss)."""
        return int(self.tgt_lengths.sum())

    def __len__(self) -> int:
        return self.src.shape[0]


def pad_sequences(sequences: Sequence[torch.Tensor], *, prefix: int | None = None, suffix: int | None = None,
                  pad_id: int = PAD_ID, multiple: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pads 1-D int64 tensors into ``(B, W)`` after adding an optional prefix/suffix id to each, ``W`` the
    longest length rounded up to a multiple of ``multiple``.

    Returns (padded, lengths).
    """
    extra = (prefix is not None) + (suffix is not None)
    lengths = torch.tensor([len(seq) + extra for seq in sequences], dtype=torch.int64)
    width = round_up(int(lengths.max()) if len(sequences) else 0, multiple)
    out = torch.full((len(sequences), width), pad_id, dtype=torch.int64)
    start = int(prefix is not None)
    for row, seq in enumerate(sequences):
        if prefix is not None:
            out[row, 0] = prefix
        out[row, start:start + len(seq)] = seq
        if suffix is not None:
            out[row, start + len(seq)] = suffix
    return out, lengths


def collate(dataset, indices: Sequence[int], *, length_multiple: int = 1) -> Batch:
    """Builds a :class:`Batch` from ``dataset.src[i]``, ``dataset.tgt[i]`` for ``i`` in ``indices`` (order kept), its
    source and target widths padded up to multiples of ``length_multiple`` (the sampler's, which budgets for them)."""
    if len(indices) == 0:
        raise ValueError("collate: empty list of indices")
    src, src_lengths = pad_sequences([dataset.src[i] for i in indices], multiple=length_multiple)
    tgt = [dataset.tgt[i] for i in indices]
    tgt_in, tgt_lengths = pad_sequences(tgt, prefix=BOS_ID, multiple=length_multiple)
    tgt_out, _ = pad_sequences(tgt, suffix=EOS_ID, multiple=length_multiple)
    return Batch(src=src, src_lengths=src_lengths, tgt_in=tgt_in, tgt_out=tgt_out, tgt_lengths=tgt_lengths,
                 indices=torch.tensor(list(indices), dtype=torch.int64))


class Collater:
    """Picklable ``collate_fn`` for ``DataLoader(range(len(ds)), batch_sampler=sampler, collate_fn=Collater(ds))``."""

    def __init__(self, dataset, length_multiple: int = 1):
        self.dataset = dataset
        self.length_multiple = length_multiple

    def __call__(self, indices: Sequence[int]) -> Batch:
        return collate(self.dataset, [int(i) for i in indices], length_multiple=self.length_multiple)
