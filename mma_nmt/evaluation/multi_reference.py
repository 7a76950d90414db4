"""BLEU against several references per sentence, test set by test set, and the average over the sets: the NIST Zh-En
protocol of the GMM paper ("MT03, MT04, MT05, MT06, MT08 as the test sets, each with 4 English references. Results are
averaged on all test sets").

The decoded test split is the test sets concatenated in a fixed order; :func:`score_test_sets` cuts the hypotheses
back into the sets by their sizes and scores each set against all of its references with sacreBLEU.
"""

from __future__ import annotations

from pathlib import Path

from sacrebleu.metrics import BLEU

from mma_nmt.data.corpora import get_corpus
from mma_nmt.data.fileio import read_text_lines
from mma_nmt.data.reference_sets import ReferenceSet

__all__ = ["ReferenceSet", "multi_reference_bleu", "score_test_sets", "concatenated_streams", "run_reference_sets",
           "multi_reference_scores"]


def multi_reference_bleu(hypotheses: list[str], references: list[list[str]], *, tokenize: str = "13a",
                         lowercase: bool = False) -> tuple[float, str]:
    """sacreBLEU corpus BLEU of ``hypotheses`` against every reference stream at once (n-gram counts clipped by the
    maximum over the references, brevity penalty from the closest reference length); returns (BLEU, signature)."""
    for index, stream in enumerate(references):
        if len(stream) != len(hypotheses):
            raise ValueError(f"reference {index} has {len(stream)} lines but there are {len(hypotheses)} hypotheses")
    metric = BLEU(tokenize=tokenize, lowercase=lowercase)
    return metric.corpus_score(hypotheses, references).score, str(metric.get_signature())


def score_test_sets(hypotheses: list[str], test_sets: list[ReferenceSet], *, tokenize: str = "13a",
                    lowercase: bool = False) -> dict:
    """Multi-reference BLEU of each test set and their unweighted mean.

    ``hypotheses`` are the translations of the test sets concatenated in the order of ``test_sets``. Returns
    ``{"bleu_by_test_set": {name: BLEU}, "bleu_test_set_mean": mean, "references_per_set": {name: n},
    "bleu_signature": signature}``.
    """
    if not test_sets:
        raise ValueError("no test set to score")
    total = sum(len(test_set) for test_set in test_sets)
    if total != len(hypotheses):
        raise ValueError(f"{len(hypotheses)} hypotheses but the test sets "
                         f"{[(t.name, len(t)) for t in test_sets]} hold {total} sentences")
    scores, signature, start = {}, "", 0
    for test_set in test_sets:
        part = hypotheses[start:start + len(test_set)]
        scores[test_set.name], signature = multi_reference_bleu(part, test_set.references, tokenize=tokenize,
                                                                lowercase=lowercase)
        start += len(test_set)
    return {"bleu_by_test_set": scores, "bleu_test_set_mean": sum(scores.values()) / len(scores),
            "references_per_set": {t.name: len(t.references) for t in test_sets}, "bleu_signature": signature}


def concatenated_streams(test_sets: list[ReferenceSet]) -> list[list[str]]:
    """The reference streams of the test sets concatenated in their order (stream ``i``: reference ``i`` of every
    sentence of the test split), for a paired test against every reference. All sets must have as many references."""
    counts = {len(test_set.references) for test_set in test_sets}
    if len(counts) != 1:
        raise ValueError(f"the test sets have different numbers of references "
                         f"{[(t.name, len(t.references)) for t in test_sets]}; they cannot be tested as one split")
    return [[line for test_set in test_sets for line in test_set.references[index]] for index in range(counts.pop())]


def run_reference_sets(run) -> list[ReferenceSet] | None:
    """For a run (a :class:`~mma_nmt.training.config.RunConfig`) on a corpus scored on several test sets with several
    references each (NIST Zh-En): the :class:`ReferenceSet` of each test set, in the order of the test split; None
    for every other corpus (and for a split other than the test split)."""
    spec = get_corpus(run.data.corpus)
    if not spec.test_sets or run.eval.split != "test":
        return None
    return spec.reference_sets(*run.data.corpus_roots())


def multi_reference_scores(run, hypotheses: Path) -> dict | None:
    """For a run on a corpus scored on several test sets with several references each (NIST Zh-En): BLEU per test set
    and its mean over the sets (the paper's protocol, :func:`score_test_sets`); None for every other corpus."""
    sets = run_reference_sets(run)
    if sets is None:
        return None
    return score_test_sets(read_text_lines(hypotheses), sets, tokenize=run.eval.bleu_tokenize)
