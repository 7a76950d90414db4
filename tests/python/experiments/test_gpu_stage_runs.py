"""``scripts/gpu_stage_runs.py``: what a lent GPU machine hands back of the runs it trained must fit one call's limits
(8 files, 16 MiB each, 64 MiB together), keep every part of a checkpoint in one batch, most needed first, and join
back into the very checkpoint."""

from __future__ import annotations

import importlib.util
import json
import os
import tarfile
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "gpu_stage_runs.py"


@pytest.fixture()
def stage_runs(monkeypatch):
    spec = importlib.util.spec_from_file_location("gpu_stage_runs", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "PART", 1000)  # the limits scaled down 15 MiB -> 1,000 bytes
    monkeypatch.setattr(module, "BATCH_BYTES", 4000)
    return module


def _run(root: Path, name: str, *, last: int, best: int | None, last_is_best: bool, finished: bool = False) -> Path:
    run = root / "runs" / "experiments" / "mini" / "corpus" / name
    run.mkdir(parents=True)
    (run / "cell.json").write_text("{}")
    (run / "log.jsonl").write_text(json.dumps({"event": "valid", "step": 200, "best": last_is_best}) + "\n")
    (run / "last.pt").write_bytes(os.urandom(last))
    if best is not None:
        (run / "best.pt").write_bytes(os.urandom(best))
    if finished:
        (run / "result.json").write_text("{}")
    return run


def test_batches_fit_the_limits_keep_checkpoints_whole_and_join_back(tmp_path, monkeypatch, stage_runs):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "marker").write_text("")
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "session.log").write_text("log")
    runs = {"a": _run(tmp_path, "a", last=2500, best=2500, last_is_best=False),  # last.pt and best.pt wanted
            "b": _run(tmp_path, "b", last=1500, best=1500, last_is_best=True),  # best.pt is last.pt: not sent
            "c": _run(tmp_path, "c", last=900, best=900, last_is_best=True, finished=True)}  # best.pt, for analyses
    stage_runs.main(tmp_path / "stage", tmp_path / "marker", tmp_path / "logs")

    batches = sorted((p for p in (tmp_path / "stage").iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    names = [sorted(f.name for f in batch.iterdir()) for batch in batches]
    for batch in batches:  # within one call's limits (scaled down), the state archive included
        files = list(batch.iterdir())
        assert len(files) <= 8 and sum(f.stat().st_size for f in files) <= 4000
    assert "runs_state.tgz" in names[0]
    sent = [name.split(".part")[0] for batch in names for name in batch if ".part" in name]
    assert sorted(set(sent)) == ["a__best.pt", "a__last.pt", "b__last.pt", "c__best.pt"]
    batch_of = {checkpoint: index for index, batch in enumerate(names) for name in batch
                for checkpoint in [name.split(".part")[0]]}
    assert batch_of["a__last.pt"] <= batch_of["b__last.pt"] <= batch_of["a__best.pt"] <= batch_of["c__best.pt"]
    for checkpoint in set(sent):  # whole in one batch, and the parts join back into the file
        holding = [batch for batch in batches if any(f.name.startswith(checkpoint) for f in batch.iterdir())]
        assert len(holding) == 1, checkpoint
        joined = b"".join(p.read_bytes() for p in sorted(holding[0].glob(checkpoint + ".part*")))
        run, name = checkpoint.split("__")
        assert joined == (runs[run] / name).read_bytes()
    with tarfile.open(batches[0] / "runs_state.tgz") as tar:
        members = tar.getnames()
    assert "gpu_logs/session.log" in members
    assert all(f"runs/experiments/mini/corpus/{run}/log.jsonl" in members for run in runs)
    assert "runs/experiments/mini/corpus/c/result.json" in members
