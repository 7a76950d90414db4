"""The notebooks find trained runs on disk: the best finished experiment run of the wanted systems, the demo's run, and
fall back to their own tiny models when a wanted run is missing or none may be searched."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from nmt_fixtures import tiny_data, tiny_overrides  # noqa: F401  (fixture)

from mma_nmt.demos import notebook_models
from mma_nmt.demos.notebook_models import NotebookModel, models_for_notebook, notebook_scale
from mma_nmt.demos.trained_runs import RUNS_ENV, best_run, runs_root


def _prepared(root: Path, name: str, src: str = "de", tgt: str = "en") -> str:
    folder = root / "data" / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "meta.json").write_text(json.dumps({"corpus": {"src_lang": src, "tgt_lang": tgt}}))
    return f"runs/data/{name}"  # relative to the repository root, as experiments write it


def _experiment_run(root: Path, paper: str, system: str, bleu: float | None, *, scale: str = "mini",
                    out_dir: str = "runs/data/m30k", dataset: str = "de_en") -> Path:
    run_dir = root / "experiments" / scale / "multi30k" / f"{system}-{abs(hash((paper, system, scale, bleu))):x}"
    run_dir.mkdir(parents=True)
    (run_dir / "cell.json").write_text(json.dumps({"experiment": paper, "system": system, "dataset": dataset,
                                                   "scale": scale, "config": {"data": {"out_dir": out_dir}}}))
    if bleu is not None:  # None: an unfinished run
        (run_dir / "result.json").write_text(json.dumps({"bleu": bleu, "checkpoint": "best.pt"}))
    (run_dir / "best.pt").write_bytes(b"weights")
    return run_dir


@pytest.fixture
def runs(tmp_path) -> Path:
    root = tmp_path / "runs"
    _prepared(root, "m30k")
    return root


def test_the_best_finished_run_of_the_wanted_systems_is_chosen(runs):
    _experiment_run(runs, "mma", "mma", 30.0)
    best = _experiment_run(runs, "mma", "mma_seed2", 32.5)
    _experiment_run(runs, "mma", "mma_seed3", None)  # unfinished
    _experiment_run(runs, "mma", "local", 40.0)  # another system
    _experiment_run(runs, "gmm", "mma", 45.0)  # another paper
    _experiment_run(runs, "mma", "mma", 50.0, scale="smoke")  # smoke runs train for seconds
    found = best_run("mma", ("mma", "mma_seed2", "mma_seed3"), root=runs)
    assert found.run_dir == best and found.bleu == 32.5 and found.system == "mma_seed2"
    assert found.prepared_dir == runs.resolve().parent / "runs/data/m30k"
    assert "mma-nmt experiment mma: system mma_seed2 on de_en (mini scale), test BLEU 32.50" in found.describe()


def test_a_full_scale_run_beats_a_mini_one_and_languages_filter(runs):
    _prepared(runs, "wmt", src="en", tgt="ja")
    _experiment_run(runs, "mma", "mma", 35.0)
    full = _experiment_run(runs, "mma", "mma", 20.0, scale="full", out_dir="runs/data/wmt", dataset="en_ja")
    assert best_run("mma", ("mma",), root=runs).run_dir == full
    assert best_run("mma", ("mma",), root=runs, languages={"en", "de"}).bleu == 35.0


def test_runs_without_checkpoint_or_prepared_data_are_skipped(runs):
    (_experiment_run(runs, "mma", "mma", 35.0) / "best.pt").unlink()
    _experiment_run(runs, "mma", "mma", 30.0, out_dir="runs/data/gone")
    assert best_run("mma", ("mma",), root=runs) is None


def test_the_demo_run_counts_when_asked_for(runs, tmp_path):
    demo_dir = runs / "tiny_mma_multi30k"
    (demo_dir / "translations").mkdir(parents=True)
    (demo_dir / "best.pt").write_bytes(b"weights")
    config = {"data": {"corpus": "multi30k_de_en", "out_dir": str(runs / "data" / "m30k")}}
    (demo_dir / "translations" / "test.scores.json").write_text(json.dumps({"bleu": 28.4, "run_config": config}))
    _experiment_run(runs, "mma", "mma", 27.0)
    assert best_run("mma", ("mma",), root=runs).bleu == 27.0
    found = best_run("mma", ("mma",), root=runs, demo=True)
    assert found.experiment == "demo" and found.bleu == 28.4 and found.checkpoint == demo_dir / "best.pt"


def test_the_search_folder_comes_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv(RUNS_ENV, raising=False)
    assert runs_root() == Path("../runs")
    monkeypatch.setenv(RUNS_ENV, "none")
    assert runs_root() is None and best_run("mma", ("mma",)) is None
    monkeypatch.setenv(RUNS_ENV, str(tmp_path))
    assert runs_root() == tmp_path


def _record_loads(monkeypatch) -> list:
    calls = []
    monkeypatch.setattr(notebook_models, "load_found", lambda run: calls.append(("found", run.system)) or run.system)
    monkeypatch.setattr(notebook_models, "train_or_load", lambda run: calls.append(("tiny", run)) or "tiny")
    return calls


WANTED = {"GMM": NotebookModel(("ours",), "gmm", {"preset": "transformer_tiny"}),
          "baseline": NotebookModel(("baseline",), "baseline", {"preset": "transformer_tiny"})}


def test_a_notebook_loads_its_runs_when_all_are_there_on_the_same_data(runs, monkeypatch, tmp_path):
    monkeypatch.setenv(RUNS_ENV, str(runs))
    calls = _record_loads(monkeypatch)
    _experiment_run(runs, "gmm", "ours", 30.0)
    _experiment_run(runs, "gmm", "baseline", 29.0)
    models = models_for_notebook("gmm", WANTED, notebook_scale("tiny"), tmp_path / "cache")
    assert models == {"GMM": "ours", "baseline": "baseline"} and [c[0] for c in calls] == ["found", "found"]


def test_a_notebook_trains_all_its_own_models_when_one_run_is_missing(runs, monkeypatch, tmp_path):
    monkeypatch.setenv(RUNS_ENV, str(runs))
    calls = _record_loads(monkeypatch)
    _experiment_run(runs, "gmm", "ours", 30.0)
    _prepared(runs, "other")
    _experiment_run(runs, "gmm", "baseline", 29.0, out_dir="runs/data/other")  # other data: its test set differs
    models = models_for_notebook("gmm", WANTED, notebook_scale("tiny"), tmp_path / "cache")
    assert models == {"GMM": "tiny", "baseline": "tiny"}
    assert [Path(c[1].train.save_dir).name.split("-")[0] for c in calls] == ["gmm", "baseline"]


def test_the_demo_run_loads_with_its_model_and_its_data(tmp_path, monkeypatch, tiny_data):  # noqa: F811
    """A real (one-update) run written the way ``mma-nmt demo`` writes it: the notebook loads its weights and its
    prepared data from the run config recorded in ``test.scores.json``."""
    import torch

    from mma_nmt.pipeline import absolute_run_config
    from mma_nmt.training.config import load_run_config
    from mma_nmt.training.trainer import Trainer

    run_dir = tmp_path / "runs" / "tiny_mma_multi30k"
    run = load_run_config(None, tiny_overrides(tiny_data, run_dir, "train.max_steps=1"))
    Trainer(run).train()
    (run_dir / "translations").mkdir()
    (run_dir / "translations" / "test.scores.json").write_text(
        json.dumps({"bleu": 1.5, "run_config": absolute_run_config(run)}))
    monkeypatch.setenv(RUNS_ENV, str(tmp_path / "runs"))
    loaded = models_for_notebook("mma", {"MMA": NotebookModel(("mma",), "mma", {})}, notebook_scale("tiny"),
                                 tmp_path / "cache", demo=True)["MMA"]
    assert "the demo's run, test BLEU 1.50" in loaded.summary()
    saved = torch.load(run_dir / "best.pt", weights_only=True)["model"]
    assert all(torch.equal(saved[name], value) for name, value in loaded.model.state_dict().items())
    assert loaded.run.model == run.model and loaded.run.prepared_dir() == Path(tiny_data).resolve()
    assert len(loaded.dataset("valid")) > 0
