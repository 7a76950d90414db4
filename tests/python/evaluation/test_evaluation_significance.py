"""Paired bootstrap and approximate randomization for BLEU, chrF(++) and TER, against one or several references, and
the tables' tests on the metric they publish (tokenised BLEU, every NIST reference)."""

from __future__ import annotations

import gzip

import pytest
from sacrebleu.metrics import CHRF, TER

from mma_nmt.evaluation.bootstrap import paired_bootstrap, paired_tests
from mma_nmt.evaluation.scoring import tokenized_bleu
from nmt_fixtures import MULTI30K


def _references(n: int = 150) -> list[str]:
    with gzip.open(MULTI30K / "test_2016_flickr.en.gz", "rt", encoding="utf-8") as f:
        return [next(f).rstrip("\n") for _ in range(n)]


def _damaged(refs: list[str], every: int) -> list[str]:
    """Every ``every``-th line loses its second half: a worse system on every metric."""
    return [" ".join(r.split()[:len(r.split()) // 2]) if i % every == 0 else r for i, r in enumerate(refs)]


@pytest.mark.parametrize("test", ["bootstrap", "randomization"])
def test_both_tests_find_a_clearly_better_system_on_every_metric(test):
    refs = _references()
    good, bad = _damaged(refs, 7), _damaged(refs, 2)
    result = paired_tests(bad, good, refs, test=test, metrics=("bleu", "chrf", "ter"), samples=300)
    assert set(result) == {"bleu", "chrf", "ter"}
    assert result["bleu"]["system"] > result["bleu"]["baseline"]
    assert result["chrf"]["system"] == pytest.approx(CHRF().corpus_score(good, [refs]).score)
    assert result["ter"]["system"] == pytest.approx(TER().corpus_score(good, [refs]).score)
    assert result["ter"]["system"] < result["ter"]["baseline"]  # TER: lower is better; the test is two-sided
    assert all(r["p_value"] < 0.01 and r["test"] == test and r["samples"] == 300 for r in result.values())
    assert ("system_ci" in result["bleu"]) == (test == "bootstrap")


def test_a_metric_p_value_does_not_depend_on_the_others_tested_with_it():
    refs = _references()
    a, b = _damaged(refs, 5), _damaged(refs, 6)
    for test in ("bootstrap", "randomization"):
        alone = paired_tests(a, b, refs, test=test, metrics=("bleu",), samples=200)["bleu"]
        together = paired_tests(a, b, refs, test=test, metrics=("chrf", "bleu", "ter"), samples=200)["bleu"]
        assert alone == together
    wrapped = paired_bootstrap(a, b, refs, samples=200)["p_value"]
    assert wrapped == paired_tests(a, b, refs, samples=200)["bleu"]["p_value"]


def test_chrf_plus_plus_counts_word_bigrams():
    refs = _references(60)
    hyp = [" ".join(reversed(r.split())) for r in refs]  # same characters and words, word order lost
    plain = paired_tests(refs, hyp, refs, metrics=("chrf",), samples=50)["chrf"]["system"]
    plus = paired_tests(refs, hyp, refs, metrics=("chrf",), samples=50, chrf_word_order=2)["chrf"]["system"]
    assert plus == pytest.approx(CHRF(word_order=2).corpus_score(hyp, [refs]).score) and plus < plain


def test_several_references_are_all_used():
    """The system writes the second reference, the baseline neither: only with both references is it better."""
    first = _references(120)
    second = [" ".join(r.split()[::-1]) for r in first]
    baseline = _damaged(second, 1)
    one = paired_bootstrap(baseline, second, first, samples=200)
    both = paired_bootstrap(baseline, second, [first, second], samples=200)
    assert both["system_bleu"] == pytest.approx(100.0) and one["system_bleu"] < 20.0
    assert both["p_value"] < 0.01
    with pytest.raises(ValueError, match="same number of lines"):
        paired_tests(baseline, second, [first, second[:-1]])


def test_identical_outputs_and_bad_arguments():
    refs = _references(40)
    same = paired_tests(refs, list(refs), refs, test="randomization", metrics=("bleu", "ter"), samples=30)
    assert same["bleu"]["p_value"] == same["ter"]["p_value"] == 1.0
    with pytest.raises(ValueError, match="randomization trials must be at least 1"):
        paired_tests(refs, refs, refs, test="randomization", samples=0)
    with pytest.raises(ValueError, match="no significance test 'wilcoxon'"):
        paired_tests(refs, refs, refs, test="wilcoxon")
    with pytest.raises(ValueError, match="no metric 'meteor'"):
        paired_tests(refs, refs, refs, metrics=("meteor",))


def _record(tmp_path, name, lines, **metrics):
    path = tmp_path / f"{name}.hyp.txt"
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return {"seed": 1, "hypotheses": str(path), "dataset": "toy", "config": {}, "metrics": metrics}


def test_a_tokenised_table_tests_the_tokenised_bleu_it_publishes(tmp_path):
    """A table of tokenised BLEU bootstraps tokenised BLEU (Moses-tokenised, tokenize=none), not 13a BLEU: its
    resampled system score is the record's tokenised BLEU, and a record whose number is another metric's is refused."""
    from mma_nmt.experiments.report import TestReferences, _compare

    refs = [r.replace(" .", ".").replace("a ", "a, ") for r in _references(80)]  # punctuation Moses splits
    good, bad = _damaged(refs, 9), _damaged(refs, 3)
    references = TestReferences(lines=refs, lang="en")
    ours = _record(tmp_path, "ours", good, tokenized_bleu=tokenized_bleu(good, refs, "en"))
    base = _record(tmp_path, "base", bad, tokenized_bleu=tokenized_bleu(bad, refs, "en"))
    compared = _compare(ours, base, references, "tokenized_bleu", 100)
    assert compared["delta"] == pytest.approx(ours["metrics"]["tokenized_bleu"] - base["metrics"]["tokenized_bleu"])
    assert compared["significant"]
    wrong = {**ours, "metrics": {"tokenized_bleu": ours["metrics"]["tokenized_bleu"] + 1.0}}
    with pytest.raises(ValueError, match="scores tokenized_bleu .* but its record says"):
        _compare(wrong, base, references, "tokenized_bleu", 100)


def test_a_nist_column_tests_against_every_reference(tmp_path):
    from mma_nmt.experiments.report import TestReferences, _significance

    first = _references(60)
    second = [" ".join(r.split()[::-1]) for r in first]
    references = TestReferences(lines=first, lang="en", streams=[first, second])
    ours = _record(tmp_path, "ours", second, bleu=0.0, multi_reference={"bleu_test_set_mean": 100.0})
    base = _record(tmp_path, "base", _damaged(second, 1), bleu=0.0, multi_reference={"bleu_test_set_mean": 20.0})
    test = _significance(ours, base, references, "bleu", 100)
    assert test["system_bleu"] == pytest.approx(100.0) and test["p_value"] < 0.05
