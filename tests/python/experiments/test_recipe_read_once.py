"""One ``mma-nmt experiment`` command reads its paper's recipe once (issue 53): ``experiment.toml`` and each run-config
file a scale's recipe names are read a single time, however many runs, seeds and tables use them, whether the command
trains, rebuilds the tables ``--from-records`` or reports ``--status``."""

from __future__ import annotations

import tomllib
from collections import Counter
from pathlib import Path

import pytest

import mma_nmt.config_io
import mma_nmt.experiments.command as command
import mma_nmt.experiments.spec
from mma_nmt.cli.main import main

REPO = Path(__file__).resolve().parents[3]
PAPERS = ("mma", "lstm_multihead", "mlmha", "multihop", "gmm")
BASE = """
[data]
corpus = "multi30k_de_en"
out_dir = "runs/data/x"
[model]
preset = "transformer_tiny"
[train]
max_steps = 2
"""
# two columns on one base file (named twice), two tables, three seeds: 14 runs; a smoke recipe no mini run reads
EXPERIMENT = """
name = "toy"
[datasets.de_en]
mini = { base = "base.toml", label = "Multi30k De-En (for X)" }
smoke = { base = "smoke.toml", label = "Multi30k De-En, smoke" }
[datasets.de_en_again]
mini = { base = "./base.toml", set = { "train.max_steps" = 3 }, label = "Multi30k De-En (for Y)" }
[systems.baseline]
label = "Base"
[systems.mma]
set = { "model.encoder.attention" = "mma" }
[systems.wider]
set = { "model.ffn_dim" = 96 }
[tables.t]
title = "T"
columns = ["de_en", "de_en_again"]
rows = ["baseline", "mma"]
baseline = "baseline"
seeds = { mini = [1, 2, 3] }
[tables.u]
title = "U"
columns = ["de_en"]
rows = ["baseline", "wider"]
baseline = "baseline"
"""


@pytest.fixture
def reads(monkeypatch):
    """The files the recipe loader reads (by resolved path), and how many TOML texts anything parsed."""
    files, parsed = Counter(), Counter()
    real_load, real_loads = mma_nmt.config_io.load_file, tomllib.loads

    def load_file(path):
        files[Path(path).resolve()] += 1
        return real_load(path)

    def loads(text, **kwargs):
        parsed["toml"] += 1
        return real_loads(text, **kwargs)

    monkeypatch.setattr(mma_nmt.config_io, "load_file", load_file)
    monkeypatch.setattr(mma_nmt.experiments.spec, "load_file", load_file)
    monkeypatch.setattr(tomllib, "loads", loads)
    return files, parsed


@pytest.fixture
def toy(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "toy"
    folder.mkdir()
    (folder / "base.toml").write_text(BASE)
    (folder / "smoke.toml").write_text(BASE)
    (folder / "experiment.toml").write_text(EXPERIMENT)
    monkeypatch.chdir(tmp_path)
    return folder


@pytest.mark.parametrize("mode", [["--from-records"], ["--status"], []])
def test_one_command_reads_each_recipe_file_once(toy, reads, mode, monkeypatch, capsys):
    trained = []
    monkeypatch.setattr(command, "run_cells", lambda experiment, runs, *a, **k: trained.extend(runs) or ({}, []))
    assert main(["experiment", str(toy), "--scale", "mini", "--runs-dir", "runs", *mode]) == 0
    files, parsed = reads
    assert dict(files) == {(toy / "experiment.toml").resolve(): 1, (toy / "base.toml").resolve(): 1}
    assert parsed["toml"] == 2  # nothing else parsed a TOML file behind the loader's back
    if not mode:  # it planned to train every run: 3 seeds x 2 rows x 2 columns of t, and u's baseline (the recipe's
        assert len({run.identity for run in trained}) == 14  # own seed, unlike t's seed 1: another run) and wider
    if mode == ["--status"]:
        assert "14 runs: 14 not started" in capsys.readouterr().out


@pytest.mark.parametrize("paper", PAPERS)
def test_the_status_of_a_paper_reads_its_recipe_once(paper, reads, tmp_path, capsys):
    assert main(["experiment", paper, "--scale", "mini", "--status", "--runs-dir", str(tmp_path / "runs")]) == 0
    files, parsed = reads
    experiment = REPO / "experiments" / paper / "experiment.toml"
    assert files[experiment.resolve()] == 1 and set(files.values()) == {1}, files
    assert parsed["toml"] == len(files) >= 2, files
