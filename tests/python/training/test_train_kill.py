"""SIGKILL during a checkpoint write and during training steps: no half-written checkpoint under a final name, stale
temporary files removed by the next save, and the resumed run ends bit-identical to an uninterrupted one.

Every run (12 steps, validation and checkpoints every 4 steps, dropout on) is a child process (``kill_child.py``)
that kills itself at a chosen point; the test then restarts it with resumption and compares every checkpoint file
with the uninterrupted run's."""

from __future__ import annotations

import gzip
import json
import multiprocessing
import random
import signal
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

import kill_child
from mma_nmt.data import PrepareConfig, prepare
from mma_nmt.training.checkpoint import CheckpointManager, load_checkpoint
from nmt_fixtures import MULTI30K, tiny_overrides

COMMON = ["train.max_steps=12", "train.validate_every=4", "train.keep_periodic=1", "model.dropout=0.2",
          "model.attention_dropout=0.1"]
SAVE_STEP = 8  # checkpoints are written at steps 4, 8 and 12; the kills hit the save of step 8

# (file, point, step of last.pt after the kill). Write order of one save: best.pt, step_<n>.pt, last.pt, pruning.
SAVE_KILLS = [
    ("best.pt", "writing", 4), ("best.pt", "written", 4), ("best.pt", "renamed", 4),
    ("step.pt", "writing", 4), ("step.pt", "written", 4), ("step.pt", "renamed", 4),
    ("last.pt", "writing", 4), ("last.pt", "written", 4), ("last.pt", "renamed", 8),
    (None, "pruned", 8),
]
PHASES = ("forward", "backward", "update")
TRAIN_KILL_SEEDS = range(1, 11)  # each draws one (step, phase) to kill at, 1 <= step <= 12 (8 distinct points)


def train_kill_points(seeds=TRAIN_KILL_SEEDS) -> list[tuple[int, str]]:
    """The (step, phase) points drawn from ``seeds``, in the order a run reaches them."""
    points = set()
    for seed in seeds:
        rng = random.Random(seed)
        points.add((rng.randint(1, 12), rng.choice(PHASES)))
    return sorted(points, key=lambda p: (p[0], PHASES.index(p[1])))


@dataclass
class Child:
    returncode: int  # -9 for SIGKILL
    output: str  # the child's stdout and stderr, for failure messages


def run_child(data: Path, save_dir: Path, kill: dict | None) -> Child:
    """Trains in a new process, forked from a forkserver that imported torch and mma_nmt once (a fresh interpreter
    per run would spend most of its time importing torch)."""
    context = multiprocessing.get_context("forkserver")
    # torch._dynamo: imported lazily by the optimizer's constructor, as long again as torch itself
    context.set_forkserver_preload(["torch", "torch._dynamo", "mma_nmt.training.trainer", "kill_child"])
    output = save_dir.parent / f"{save_dir.name}.output.txt"
    process = context.Process(target=kill_child.run_logged,
                              args=(tiny_overrides(data, save_dir, *COMMON), kill, str(output)))
    process.start()
    process.join(timeout=600)
    if process.exitcode is None:
        process.kill()
        process.join()
    return Child(process.exitcode, output.read_text(errors="replace")[-3000:] if output.exists() else "")


def visible_checkpoints(save_dir: Path) -> list[str]:
    return sorted(p.name for p in save_dir.glob("[!.]*.pt"))  # not the temporaries (.last.pt.<random>.tmp)


def assert_same(a, b, where: str = "") -> None:
    """Recursive exact equality of two checkpoint payloads (tensors with torch.equal)."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), (where, sorted(a), sorted(b))
        for key in a:
            assert_same(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple)) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    else:
        assert a == b, (where, a, b)


def assert_all_checkpoints_usable(save_dir: Path, model_config: dict) -> dict[str, dict]:
    """Every file under a final name loads with weights_only and holds finite weights; returns them by name."""
    payloads = {}
    for name in visible_checkpoints(save_dir):
        payload = load_checkpoint(save_dir / name, model_config=model_config)
        assert all(torch.isfinite(t).all() for t in payload["model"].values() if t.is_floating_point()), name
        payloads[name] = payload
    return payloads


def assert_matches_straight_run(save_dir: Path, straight: Path) -> None:
    """Same checkpoint files as the uninterrupted run, each equal in everything but the run's own save_dir."""
    assert visible_checkpoints(save_dir) == visible_checkpoints(straight)
    for name in visible_checkpoints(straight):
        a = torch.load(straight / name, weights_only=True)
        b = torch.load(save_dir / name, weights_only=True)
        a.pop("train_config"), b.pop("train_config")
        assert_same(a, b, name)


def resume_events(save_dir: Path) -> list[int]:
    return [e["step"] for e in map(json.loads, (save_dir / "log.jsonl").open()) if e["event"] == "resume"]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """The first 50 Multi30k training pairs and 40 validation pairs (a short validation keeps each run quick)."""
    root = tmp_path_factory.mktemp("kill_corpus")
    folder = root / "multi30k"
    folder.mkdir()
    for stem, lines in (("train", 50), ("val", 40)):
        for lang in ("de", "en"):
            with gzip.open(MULTI30K / f"{stem}.{lang}.gz", "rt", encoding="utf-8") as source:
                (folder / f"{stem}.{lang}").write_text("".join(next(source) for _ in range(lines)), encoding="utf-8")
    return prepare(PrepareConfig(corpus="multi30k_de_en", data_dir=str(root), out_dir=str(root / "prepared"),
                                 vocab_size=320, splits=("train", "valid"), progress=False))


@pytest.fixture(scope="module")
def straight(data, tmp_path_factory) -> Path:
    """The uninterrupted run."""
    save_dir = tmp_path_factory.mktemp("straight")
    done = run_child(data, save_dir, None)
    assert done.returncode == 0, done.output
    assert visible_checkpoints(save_dir) == ["best.pt", "last.pt", "step_12.pt"]
    saves = [e for e in map(json.loads, (save_dir / "log.jsonl").open()) if e["event"] == "checkpoint"]
    assert [(e["step"], e["best"]) for e in saves] == [(4, True), (8, True), (12, True)]  # best.pt at each save
    return save_dir


@pytest.mark.parametrize("file, point, last_step", SAVE_KILLS,
                         ids=[f"{f or 'prune'}-{p}" for f, p, _ in SAVE_KILLS])
def test_kill_during_checkpoint_write_leaves_complete_files_and_resumes_identically(
        data, straight, tmp_path, file, point, last_step):
    save_dir = tmp_path / "run"
    killed = run_child(data, save_dir, {"save_step": SAVE_STEP, "file": file, "point": point})
    assert killed.returncode == -signal.SIGKILL, killed.output

    model_config = torch.load(straight / "last.pt", weights_only=True)["model_config"]
    payloads = assert_all_checkpoints_usable(save_dir, model_config)
    assert payloads["last.pt"]["step"] == last_step
    # best.pt holds at least the best state last.pt knows of (it may be ahead: a replay rewrites it identically)
    assert payloads["best.pt"]["best"] <= payloads["last.pt"]["best"]
    temporaries = CheckpointManager(save_dir).stale_temporaries()
    if point in ("writing", "written"):
        target = f"step_{SAVE_STEP}.pt" if file == "step.pt" else file
        assert len(temporaries) == 1 and temporaries[0].name.startswith(f".{target}."), temporaries
        if point == "writing":  # the half-written bytes exist only under the temporary name
            with pytest.raises(Exception):
                torch.load(temporaries[0], weights_only=True)
    else:
        assert temporaries == []

    resumed = run_child(data, save_dir, None)
    assert resumed.returncode == 0, resumed.output
    assert resume_events(save_dir) == [last_step]
    assert CheckpointManager(save_dir).stale_temporaries() == []  # removed by the first save after the restart
    assert_matches_straight_run(save_dir, straight)


def test_kills_at_random_training_steps_resume_identically(data, straight, tmp_path):
    points = train_kill_points()
    assert len(points) == 8 and {4 * ((step - 1) // 4) for step, _ in points} == {0, 4, 8}  # resumes from each save
    save_dir = tmp_path / "run"
    model_config = torch.load(straight / "last.pt", weights_only=True)["model_config"]
    survived, replayed = 0, []
    for step, phase in points:
        killed = run_child(data, save_dir, {"train_step": step, "phase": phase})
        assert killed.returncode == -signal.SIGKILL, (step, phase, killed.output)
        payloads = assert_all_checkpoints_usable(save_dir, model_config)
        saved = payloads["last.pt"]["step"] if payloads else 0
        assert saved == 4 * ((step - 1) // 4), (step, phase, saved)  # the last save before the killed update
        assert CheckpointManager(save_dir).stale_temporaries() == []
        replayed.append(step - 1 - saved)
        survived += 1
    finished = run_child(data, save_dir, None)
    assert finished.returncode == 0, finished.output
    assert resume_events(save_dir) == [4 * ((step - 1) // 4) for step, _ in points if step > 4]
    assert_matches_straight_run(save_dir, straight)
    print(f"training kills survived: {survived} at {points}; updates replayed after each: {replayed}")
