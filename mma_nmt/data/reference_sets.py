"""A test set scored against several references per sentence (NIST Zh-En): its name and its reference streams.

The corpus layout (:meth:`mma_nmt.data.corpora.CorpusSpec.reference_sets`) reads them; the scoring
(:func:`mma_nmt.evaluation.multi_reference.score_test_sets`) uses them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class ReferenceSet:
    """One test set: its name and its reference streams (``references[i][j]``: reference ``i`` of sentence ``j``)."""

    name: str
    references: list[list[str]]

    def __post_init__(self):
        if not self.references:
            raise ValueError(f"test set {self.name!r} has no reference")
        sizes = {len(stream) for stream in self.references}
        if len(sizes) != 1:
            raise ValueError(f"test set {self.name!r}: its references have different numbers of lines "
                             f"{[len(stream) for stream in self.references]}")

    def __len__(self) -> int:
        return len(self.references[0])
