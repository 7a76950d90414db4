"""The (B, S, T) shapes of an epoch's training batches, counted without building them.

Under ``torch.compile(mode="reduce-overhead")`` every distinct shape records its own CUDA graphs (torch warns past a
few), and the LSTM's compiled decoder step records one per step position and (B, S) shape. ``train.length_multiple``
(:class:`~mma_nmt.data.sampler.TokenBatchSampler`) trades padding for fewer shapes; this says how many an epoch has.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from mma_nmt.data.sampler import TokenBatchSampler, round_up


@dataclass(frozen=True)
class EpochShapes:
    shapes: Counter  # (sentences, source width, target width) -> batches of that shape
    padding: float  # the share of the batches' source and target positions that are padding

    @property
    def distinct(self) -> int:
        return len(self.shapes)

    @property
    def batches(self) -> int:
        return sum(self.shapes.values())


def epoch_shapes(sampler: TokenBatchSampler, src_lengths: Sequence[int], tgt_lengths: Sequence[int],
                 epoch: int | None = None) -> EpochShapes:
    """The shapes of ``sampler``'s batches in ``epoch`` (its current one by default) as ``collate`` pads them: the
    source to its longest row, the target to its longest plus BOS (or EOS), both rounded up to the sampler's
    ``length_multiple``. The sampler's position does not move."""
    multiple = sampler.length_multiple
    shapes: Counter = Counter()
    real = padded = 0
    for batch in sampler.epoch_batches(sampler.epoch if epoch is None else epoch):
        src = [src_lengths[i] for i in batch]
        tgt = [tgt_lengths[i] + 1 for i in batch]
        width_src, width_tgt = round_up(max(src), multiple), round_up(max(tgt), multiple)
        shapes[(len(batch), width_src, width_tgt)] += 1
        real += sum(src) + sum(tgt)
        padded += len(batch) * (width_src + width_tgt)
    return EpochShapes(shapes, 1.0 - real / padded if padded else 0.0)
