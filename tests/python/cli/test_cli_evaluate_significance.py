"""``mma-nmt evaluate --baseline``: paired bootstrap and approximate randomization of BLEU, chrF(++) and TER, in the
JSON and in the summary; ``eval.chrf_word_order = 2`` scores chrF++."""

from __future__ import annotations

import gzip
import json

import pytest
from sacrebleu.metrics import CHRF

from mma_nmt.cli.main import main
from mma_nmt.training.config import load_run_config
from nmt_fixtures import MULTI30K


def _write(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


@pytest.fixture
def files(tmp_path):
    with gzip.open(MULTI30K / "test_2016_flickr.en.gz", "rt", encoding="utf-8") as f:
        refs = [next(f).rstrip("\n") for _ in range(120)]
    good = [" ".join(r.split()[:-1]) if i % 6 == 0 else r for i, r in enumerate(refs)]
    bad = [" ".join(r.split()[: len(r.split()) // 2]) if i % 2 == 0 else r for i, r in enumerate(refs)]
    return refs, good, _write(tmp_path / "ref.txt", refs), _write(tmp_path / "hyp.txt", good), \
        _write(tmp_path / "base.txt", bad)


def test_evaluate_reports_both_tests_for_every_metric(files, tmp_path, capsys):
    refs, good, ref, hyp, base = files
    args = ["evaluate", "--hyp", hyp, "--ref", ref, "--baseline", base, "--bootstrap-samples", "200",
            "--randomization-trials", "300", "--set", "eval.chrf_word_order=2", "--set", "eval.tokenized_bleu=false"]
    assert main(args + ["--json", "--scores", str(tmp_path / "s.json")]) in (0, None)
    scores = json.loads(capsys.readouterr().out)
    assert scores["chrf"] == pytest.approx(CHRF(word_order=2).corpus_score(good, [refs]).score)
    assert scores["chrf_name"] == "chrF2++" and "nw:2" in scores["chrf_signature"]
    tests = scores["significance"]
    assert set(tests) == {"bootstrap", "randomization"}
    for name, samples in (("bootstrap", 200), ("randomization", 300)):
        assert set(tests[name]) == {"bleu", "chrf", "ter"}
        for metric, result in tests[name].items():
            assert result["samples"] == samples and result["p_value"] < 0.05, (name, metric)
        assert tests[name]["chrf"]["system"] == pytest.approx(scores["chrf"])
        assert tests[name]["ter"]["system"] == pytest.approx(scores["ter"])
        assert tests[name]["bleu"]["system"] == pytest.approx(scores["bleu"])
    assert scores["bootstrap"]["p_value"] == tests["bootstrap"]["bleu"]["p_value"]

    assert main(args + ["--scores", str(tmp_path / "s2.json")]) in (0, None)
    text = capsys.readouterr().out
    assert "Against the baseline (paired bootstrap: 200 resamples, approximate randomization: 300 trials)" in text
    assert "chrF++" in text and "p (randomization)" in text
    ter_row = next(line for line in text.splitlines() if line.startswith("  TER "))
    assert f"{tests['bootstrap']['ter']['p_value']:.4f}" in ter_row


def test_chrf_word_order_is_checked_when_the_config_is_read():
    assert load_run_config(None, ["eval.chrf_word_order=2"]).eval.chrf_word_order == 2
    with pytest.raises(ValueError, match="eval.chrf_word_order must be 0 \\(chrF\\), 1 or 2 \\(chrF\\+\\+\\), got 3"):
        load_run_config(None, ["eval.chrf_word_order=3"])
