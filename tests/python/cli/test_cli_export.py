"""``mma-nmt export`` and ``Translator.from_pretrained`` (issue 52, point 1): the exported folder translates exactly
as its run did, through the command line and the Python API, after the prepared data folder is gone; it refuses to
write over a folder or to export NaN weights."""

from __future__ import annotations

import contextlib
import io
import json
import shutil

import pytest
import torch

from mma_nmt import Translator
from mma_nmt.cli.main import main
from mma_nmt.data.fileio import read_text_lines
from mma_nmt.training.config import load_run_config
from nmt_fixtures import prepare_tiny, tiny_overrides

DECODE = ["decode.beam_size=3", "decode.max_len_b=4", "decode.max_len_a=0.3", "eval.attention_maps=0"]
VALID_LINES = 40  # of the valid split, translated by the run and by its export


def _sets(overrides) -> list[str]:
    return [item for o in overrides for item in ("--set", o)]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A 12-step tiny Transformer trained with ``mma-nmt train`` on its own copy of the tiny data, and its
    translations of the first valid sentences (run config overrides, run directory, prepared folder, sources, hyps)."""
    from mma_nmt import pipeline

    root = tmp_path_factory.mktemp("export_run")
    data = prepare_tiny(root / "data")
    overrides = tiny_overrides(data, root / "run", "train.max_steps=12", *DECODE)
    assert main(["train", *_sets(overrides)]) == 0
    sources = (data / "valid.src.txt").read_text(encoding="utf-8").splitlines()[:VALID_LINES]
    (root / "valid.de").write_text("\n".join(sources) + "\n", encoding="utf-8")
    hyp = pipeline.translate(load_run_config(None, overrides), input_file=str(root / "valid.de"),
                             output=str(root / "run_valid.hyp"))
    split_hyp = pipeline.translate(load_run_config(None, overrides), split="valid", output=str(root / "split.hyp"))
    return overrides, root / "run", data, sources, read_text_lines(hyp), read_text_lines(split_hyp)[:VALID_LINES]


@pytest.fixture(scope="module")
def exported(run, tmp_path_factory):
    """The run exported, then its prepared data folder moved away (restored after the module)."""
    _, run_dir, data, *_ = run
    out = tmp_path_factory.mktemp("export_out") / "model"
    assert main(["export", str(run_dir), str(out)]) == 0
    hidden = data.with_name(data.name + ".hidden")
    data.rename(hidden)
    yield out
    hidden.rename(data)


def test_export_refuses_an_existing_folder_and_nan_weights(run, tmp_path, capsys):
    """(First in the module: it needs the prepared data, which the ``exported`` fixture hides.)"""
    run_dir = run[1]
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "keep.txt").write_text("mine", encoding="utf-8")
    assert main(["export", str(run_dir), str(tmp_path / "taken")]) == 2
    assert "exists and is not empty" in capsys.readouterr().err
    assert (tmp_path / "taken" / "keep.txt").read_text(encoding="utf-8") == "mine"
    bad_run = tmp_path / "bad_run"
    shutil.copytree(run_dir, bad_run)
    checkpoint = torch.load(bad_run / "last.pt", weights_only=True)
    name = next(k for k, v in checkpoint["model"].items() if v.is_floating_point())
    checkpoint["model"][name][0] = float("nan")
    torch.save(checkpoint, bad_run / "last.pt")
    (bad_run / "best.pt").unlink(missing_ok=True)
    assert main(["export", str(bad_run), str(tmp_path / "nan_model")]) == 2
    assert "non-finite weights" in capsys.readouterr().err and not (tmp_path / "nan_model").exists()


def test_the_export_holds_weights_tokenizers_and_a_declarative_config(exported):
    assert sorted(p.name for p in exported.iterdir()) == ["config.json", "model.safetensors", "spm_src.model",
                                                          "spm_tgt.model"]
    config = json.loads((exported / "config.json").read_text(encoding="utf-8"))
    assert config["decode"]["beam_size"] == 3 and config["corpus"]["src_lang"] == "de"
    assert config["source_preprocessing"] == {"lang": "de", "steps": [], "unsupported": ""}
    assert config["exported_from"]["checkpoint"] in ("best.pt", "last.pt")


def test_the_python_api_gives_the_run_translations_without_the_prepared_data(run, exported):
    _, _, data, sources, hyps, split_hyps = run
    assert not data.exists()
    assert hyps == split_hyps  # the run itself: raw text of the split translates as the split
    translator = Translator.from_pretrained(exported, device="cpu")
    assert translator.translate(sources) == hyps
    assert len(set(hyps)) > 1  # not one output for every sentence


def test_the_command_line_gives_the_run_translations_from_the_export(run, exported, tmp_path, capsys):
    sources, hyps = run[3], run[4]
    out = tmp_path / "valid.hyp"
    (tmp_path / "valid.de").write_text("\n".join(sources) + "\n", encoding="utf-8")
    assert main(["translate", "--model", str(exported), "--input", str(tmp_path / "valid.de"),
                 "--output", str(out)]) == 0, capsys.readouterr().err
    assert read_text_lines(out) == hyps


def test_stdin_streams_and_nbest_lists_scored_hypotheses(run, exported, monkeypatch, capsys):
    sources, hyps = run[3][:3], run[4][:3]
    monkeypatch.setattr("sys.stdin", io.StringIO("\n".join([sources[0], "", *sources[1:]]) + "\n"))
    assert main(["translate", "--model", str(exported), "--input", "-"]) == 0
    captured = capsys.readouterr()
    assert captured.out.split("\n")[:-1] == [hyps[0], "", *hyps[1:]]
    assert "1 empty or whitespace-only line(s)" in captured.err
    monkeypatch.setattr("sys.stdin", io.StringIO("\n".join(sources) + "\n"))
    assert main(["translate", "--model", str(exported), "--input", "-", "--nbest", "3"]) == 0
    rows = [line.split(" ||| ") for line in capsys.readouterr().out.splitlines()]
    assert [int(r[0]) for r in rows] == sorted(int(r[0]) for r in rows) and {int(r[0]) for r in rows} == {0, 1, 2}
    for index in range(3):
        mine = [r for r in rows if int(r[0]) == index]
        assert 1 < len(mine) <= 3 and mine[0][1] == hyps[index]
        scores = [float(r[2]) for r in mine]
        assert scores == sorted(scores, reverse=True) and all(s < 0 for s in scores)


def test_translate_and_attention_of_the_api(run, exported):
    sources, hyps = run[3][:2], run[4][:2]
    translator = Translator.from_pretrained(exported, device="cpu")
    scored = translator.translate(sources, beam=3, nbest=2, return_scores=True)
    assert [pairs[0][0] for pairs in scored] == hyps and all(len(pairs) == 2 for pairs in scored)
    assert all(isinstance(score, float) for pairs in scored for _, score in pairs)
    attention = translator.attention(sources[0], "A dog runs.")
    cross = attention.record.cross  # (L_dec, H, T, S)
    assert cross.shape[2:] == (len(attention.target_pieces), len(attention.source_pieces))
    assert torch.allclose(cross.sum(-1), torch.ones(cross.shape[:-1]), atol=1e-5)


@contextlib.contextmanager
def prepared_data_back(data):
    """The run's prepared data in place for the block (the ``exported`` fixture hides it), hidden again after."""
    hidden = data.with_name(data.name + ".hidden")
    was_hidden = hidden.exists()
    if was_hidden:
        hidden.rename(data)
    try:
        yield
    finally:
        if was_hidden:
            data.rename(hidden)


def test_a_float16_export_stores_rounded_weights_and_loads_them_as_float32(run, exported, tmp_path):
    """``--dtype float16``: about half the bytes on disk; loaded, the model is float32 holding exactly the
    float16-rounded weights of the run."""
    from safetensors import safe_open

    _, run_dir, data, *_ = run
    out = tmp_path / "half"
    with prepared_data_back(data):
        assert main(["export", str(run_dir), str(out), "--dtype", "float16"]) == 0
    with safe_open(str(out / "model.safetensors"), framework="pt") as weights:
        assert {weights.get_tensor(k).dtype for k in weights.keys() if weights.get_tensor(k).is_floating_point()} \
            == {torch.float16}
    assert (out / "model.safetensors").stat().st_size < 0.6 * (exported / "model.safetensors").stat().st_size
    assert json.loads((out / "config.json").read_text(encoding="utf-8"))["weights_dtype"] == "float16"
    full, half = Translator.from_pretrained(exported, device="cpu"), Translator.from_pretrained(out, device="cpu")
    for (name, a), (_, b) in zip(full.model.state_dict().items(), half.model.state_dict().items()):
        assert b.dtype == a.dtype, name
        if a.is_floating_point():
            torch.testing.assert_close(b, a.half().float(), rtol=0, atol=0, msg=name)
    assert half.translate(run[3][:2]) and half.model.training is False


def test_a_float16_export_refuses_weights_beyond_its_range(run, tmp_path, capsys):
    _, run_dir, data, *_ = run
    bad_run = tmp_path / "big_run"
    shutil.copytree(run_dir, bad_run)
    checkpoint = torch.load(bad_run / "last.pt", weights_only=True)
    name = next(k for k, v in checkpoint["model"].items() if v.is_floating_point())
    checkpoint["model"][name].view(-1)[0] = 1e6  # finite in float32, inf in float16
    torch.save(checkpoint, bad_run / "last.pt")
    (bad_run / "best.pt").unlink(missing_ok=True)
    with prepared_data_back(data):
        assert main(["export", str(bad_run), str(tmp_path / "half"), "--dtype", "float16"]) == 2
        assert f"weight {name}" in capsys.readouterr().err and not (tmp_path / "half").exists()
        assert main(["export", str(bad_run), str(tmp_path / "full")]) == 0  # float32 holds it
