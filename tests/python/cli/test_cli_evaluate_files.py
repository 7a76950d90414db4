"""``mma-nmt evaluate`` on plain text files (issue 50, cases 15 and 19): ``--hyp H --ref R`` alone scores the two
files with the configured metrics and no prepared data; a config or ``--split`` still brings the split's BLEU by source
length; two empty files are refused, named, as nothing to score."""

from __future__ import annotations

import json

import pytest

from mma_nmt.cli.main import main
from mma_nmt.data import ParallelDataset
from nmt_fixtures import prepare_tiny

HYP = "a dog runs\ntwo men play football\na woman reads a book\n"
REF = "a dog runs .\ntwo men play football .\na woman reads a book .\n"


def _files(folder, hyp=HYP, ref=REF):
    h, r = folder / "system.hyp.txt", folder / "reference.txt"
    h.write_text(hyp, encoding="utf-8")
    r.write_text(ref, encoding="utf-8")
    return h, r


def test_two_text_files_are_enough(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # no prepared data under the default data.out_dir
    hyp, ref = _files(tmp_path)
    status = main(["evaluate", "--hyp", str(hyp), "--ref", str(ref), "--json"])
    out, err = capsys.readouterr()
    assert status == 0, err
    result = json.loads(out)
    assert result["sentences"] == 3 and 0 < result["bleu"] < 100 and result["tokenized_bleu"] is not None
    assert "bleu_by_source_length" not in result
    assert json.loads((tmp_path / "system.scores.json").read_text(encoding="utf-8"))["bleu"] == result["bleu"]
    status = main(["evaluate", "--hyp", str(hyp), "--ref", str(ref), "--json", "--set", "eval.tokenized_bleu=false"])
    out, err = capsys.readouterr()
    assert status == 0, err
    assert json.loads(out)["tokenized_bleu"] is None  # the configured metrics


def test_a_named_split_still_gives_bleu_by_source_length(tmp_path, capsys):
    data = prepare_tiny(tmp_path.parent / "tiny_multi30k_50")
    lines = ParallelDataset.load(data, "valid").tgt_text
    hyp, ref = _files(tmp_path, "\n".join(lines), "\n".join(lines))
    status = main(["evaluate", "--hyp", str(hyp), "--ref", str(ref), "--split", "valid", "--json",
                   "--set", f"data.out_dir={data}", "--set", "eval.buckets=[10, 20]"])
    out, err = capsys.readouterr()
    assert status == 0, err
    assert len(json.loads(out)["bleu_by_source_length"]) == 3


@pytest.mark.parametrize("plain", [True, False])
def test_two_empty_files_are_refused_by_name(tmp_path, monkeypatch, capsys, plain):
    monkeypatch.chdir(tmp_path)
    hyp, ref = _files(tmp_path, "", "")
    extra = [] if plain else ["--set", "eval.buckets=[]"]
    status = main(["evaluate", "--hyp", str(hyp), "--ref", str(ref), *extra])
    err = capsys.readouterr().err
    assert status == 2
    assert err == f"mma-nmt: error: nothing to score: {hyp} and the references ({ref}) are both empty\n"
    assert not (tmp_path / "system.scores.json").exists()
