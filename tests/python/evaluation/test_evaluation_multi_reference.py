"""Multi-reference BLEU per test set and the mean over the sets (the GMM paper's NIST protocol), and the on-disk
layout of the references that feeds it."""

from __future__ import annotations

import gzip

import pytest

from mma_nmt.data.corpora import CorpusSpec, get_corpus
from mma_nmt.evaluation.multi_reference import ReferenceSet, multi_reference_bleu, score_test_sets

HYP = "the cat sat on the mat in the morning sun"
OTHER = "a dog was lying under a small rug at night"


def test_every_reference_counts():
    only_other, _ = multi_reference_bleu([HYP], [[OTHER]])
    both, signature = multi_reference_bleu([HYP], [[OTHER], [HYP]])
    assert only_other < 10.0 and both == pytest.approx(100.0)
    assert "nrefs:2" in signature


def test_sets_are_scored_apart_and_averaged():
    """Two sets of different quality: the mean of the set scores is not the BLEU of the concatenation, and each set's
    score is its own multi-reference BLEU."""
    good = ReferenceSet("mt03", [[HYP, "one two three four five six"], [OTHER, "one two three four five six"]])
    poor = ReferenceSet("mt04", [[OTHER], ["completely different words in this reference sentence"]])
    hypotheses = [HYP, "one two three four five six", HYP]
    result = score_test_sets(hypotheses, [good, poor])
    first, _ = multi_reference_bleu(hypotheses[:2], good.references)
    second, _ = multi_reference_bleu(hypotheses[2:], poor.references)
    assert result["bleu_by_test_set"] == {"mt03": pytest.approx(first), "mt04": pytest.approx(second)}
    assert result["bleu_test_set_mean"] == pytest.approx((first + second) / 2)
    pooled, _ = multi_reference_bleu(hypotheses, [good.references[0] + poor.references[0],
                                                  good.references[1] + poor.references[1]])
    assert abs(result["bleu_test_set_mean"] - pooled) > 1.0
    assert result["references_per_set"] == {"mt03": 2, "mt04": 2}


def test_mismatched_sizes_name_the_problem():
    with pytest.raises(ValueError, match="different numbers of lines"):
        ReferenceSet("mt05", [["a", "b"], ["a"]])
    with pytest.raises(ValueError, match="3 hypotheses but the test sets"):
        score_test_sets(["a", "b", "c"], [ReferenceSet("mt05", [["a", "b"]])])
    with pytest.raises(ValueError, match="reference 1 has 1 lines"):
        multi_reference_bleu(["a", "b"], [["a", "b"], ["a"]])


def _write(path, lines, compress=False):
    data = "".join(line + "\n" for line in lines).encode()
    path.write_bytes(gzip.compress(data) if compress else data)


def test_reference_sets_read_the_layout(tmp_path):
    spec = CorpusSpec(name="toy", src_lang="zh", tgt_lang="en", splits={"test": "all"}, local_folder="toy",
                      test_sets=("mt03", "mt04"), references=2)
    folder = tmp_path / "toy"
    folder.mkdir()
    _write(folder / "mt03.en0", ["a b c", "d e f"])
    _write(folder / "mt03.en1.gz", ["a b x", "d e y"], compress=True)
    _write(folder / "mt04.en0", ["g h i"])
    with pytest.raises(FileNotFoundError, match="mt04.en1"):
        spec.reference_sets(tmp_path)
    _write(folder / "mt04.en1", ["g h j"])
    sets = spec.reference_sets(tmp_path)
    assert [(s.name, s.references) for s in sets] == [("mt03", [["a b c", "d e f"], ["a b x", "d e y"]]),
                                                       ("mt04", [["g h i"], ["g h j"]])]
    assert spec.reversed("toy_rev").test_sets == ()


def test_nist_has_five_test_sets_with_four_references():
    nist = get_corpus("nist_zh_en")
    assert nist.test_sets == ("mt03", "mt04", "mt05", "mt06", "mt08") and nist.references == 4
    with pytest.raises(ValueError, match="one test set"):
        get_corpus("wmt14_en_de").reference_sets("unused")


def test_table_cells_of_nist_runs_read_the_mean_over_test_sets(tmp_path):
    """The experiment runner scores a NIST run set by set with 4 references, and its table shows that mean."""
    from mma_nmt.evaluation.multi_reference import multi_reference_scores
    from mma_nmt.experiments.report import score
    from mma_nmt.training.config import load_run_config

    folder = tmp_path / "nist_zh_en"
    folder.mkdir()
    hypotheses = []
    for index, stem in enumerate(("mt03", "mt04", "mt05", "mt06", "mt08")):
        sentence = f"the {stem} set has its own sentence number {index} here"
        hypotheses.append(sentence)
        for ref in range(4):  # only the last reference matches the hypothesis exactly
            text = sentence if ref == 3 else f"another reference {ref} for {stem}"
            (folder / f"{stem}.en{ref}").write_text(text + "\n", encoding="utf-8")
    hyp_file = tmp_path / "test.hyp.txt"
    hyp_file.write_text("".join(line + "\n" for line in hypotheses), encoding="utf-8")
    run = load_run_config(None, ["data.corpus=nist_zh_en", f"data.data_dir={tmp_path}"])
    scores = multi_reference_scores(run, hyp_file)
    assert set(scores["bleu_by_test_set"]) == {"mt03", "mt04", "mt05", "mt06", "mt08"}
    assert scores["bleu_test_set_mean"] == pytest.approx(100.0)  # the 4th reference counts
    record = {"metrics": {"bleu": 3.0, "multi_reference": scores}}
    assert score(record, "bleu") == pytest.approx(100.0)
    assert score({"metrics": {"bleu": 3.0}}, "bleu") == 3.0
    assert multi_reference_scores(load_run_config(None, ["data.corpus=multi30k_de_en"]), hyp_file) is None
