"""``mma-nmt experiment <paper> --status``: every state a run can be in is told apart (recorded, finished without a
record, training now, interrupted, to continue a capped run, not started), nothing is trained or written, and the
command printed for a missing run trains exactly that run."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mma_nmt.cli.main import main
from mma_nmt.experiments.command import experiment_status, run_experiment
from mma_nmt.experiments.runner import capped_predecessor, continue_from
from mma_nmt.experiments.spec import ExperimentError, load_experiment
from mma_nmt.training.run_lock import RunDirectoryLock, lock_holder

REPO = Path(__file__).resolve().parents[3]
SMOKE_BASE = REPO / "experiments" / "common" / "smoke_multi30k_de_en.toml"

EXPERIMENT = f"""
name = "states"
title = "Runs in every state"
[datasets.de_en]
label = "De-En"
smoke = {{ base = "{SMOKE_BASE}", set = {{ "train.validate_every" = 2, "train.patience" = 3 }}, label = "Multi30k De-En, smoke subset" }}
[systems.baseline]
label = "Base"
[systems.wider]
label = "Wider FFN"
set = {{ "model.ffn_dim" = 96 }}
[systems.baseline_longer]
label = "Base, 8 updates"
scale_set = {{ smoke = {{ "train.max_steps" = 8 }} }}
[tables.main]
title = "Main"
columns = ["de_en"]
rows = ["baseline", "wider"]
baseline = "baseline"
seeds = {{ smoke = [1, 2, 3] }}
[tables.longer]
title = "Trained on"
columns = ["de_en"]
rows = ["baseline", "baseline_longer"]
baseline = "baseline"
"""


def _lines_by_run(text: str) -> dict[tuple[str, int], str]:
    """The status lines keyed by (system, seed)."""
    found = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 5 and fields[3] == "seed":
            found[(fields[1], int(fields[4]))] = line
    return found


@pytest.fixture(scope="module")
def states(tmp_path_factory):
    """The experiment's runs brought into every state: baseline seed 1 recorded; wider seed 1 finished and its record
    removed; baseline seed 2 trained, its result removed as if killed before scoring; wider seed 2 interrupted (its
    result and the log's ``end`` removed, as a kill during training leaves it); seed 3 not started; baseline_longer
    seed 1 continues baseline seed 1."""
    folder = tmp_path_factory.mktemp("status")
    paper = folder / "states"
    paper.mkdir()
    (paper / "experiment.toml").write_text(textwrap.dedent(EXPERIMENT))
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(folder)
        run_experiment(str(paper), scale="smoke", runs_dir="runs", tables=["main"], seeds=[1])
        run_experiment(str(paper), scale="smoke", runs_dir="runs", tables=["main"], seeds=[2])
    experiment = load_experiment(paper)
    runs = folder / "runs" / "smoke"

    def run_dir(system: str, seed: int) -> Path:
        (found,) = runs.glob(f"*/*-{experiment.cell(system, 'de_en', 'smoke', seed=seed).identity}")
        return found

    records = paper / "results" / "smoke" / "runs" / "de_en"
    (wider_record,) = records.glob("wider-seed1-*")
    for path in wider_record.iterdir():
        path.unlink()
    wider_record.rmdir()
    for system in ("baseline", "wider"):
        (run_dir(system, 2) / "result.json").unlink()
        (record,) = records.glob(f"{system}-seed2-*")
        shutil.rmtree(record)
    log = run_dir("wider", 2) / "log.jsonl"
    log.write_text("".join(line for line in log.read_text().splitlines(keepends=True) if '"event": "end"' not in line))
    for table in (paper / "results" / "smoke").glob("*.*"):  # they publish the removed records' numbers, which a
        table.unlink()  # rebuild refuses to drop without --allow-fewer (issue 50, case 2)
    return folder, paper, run_dir


def _status(folder: Path, paper: Path, **kwargs) -> str:
    cwd = Path.cwd()
    os.chdir(folder)
    try:
        return experiment_status(str(paper), scale="smoke", runs_dir="runs", **kwargs)
    finally:
        os.chdir(cwd)


def _tree(folder: Path) -> dict[str, float]:
    return {str(p): p.stat().st_mtime_ns for p in folder.rglob("*")}


def test_every_state_is_told_apart_and_nothing_is_written(states):
    folder, paper, _ = states
    before = _tree(folder)
    text = _status(folder, paper)
    assert _tree(folder) == before
    lines = _lines_by_run(text)
    assert set(lines) == {("baseline", 1), ("wider", 1), ("baseline", 2), ("wider", 2), ("baseline", 3), ("wider", 3),
                          ("baseline_longer", 1)}
    assert " recorded " in lines[("baseline", 1)] and "stopped at 4 (max_steps; best" in lines[("baseline", 1)]
    assert "BLEU " in lines[("baseline", 1)]
    assert " finished " in lines[("wider", 1)] and "--from-records" in lines[("wider", 1)]
    trained = lines[("baseline", 2)]
    assert " trained " in trained and "training stopped at 4 (max_steps; best " in trained
    assert "translation and scoring not finished" in trained
    interrupted = lines[("wider", 2)]
    assert " interrupted " in interrupted and "update 4 of 4" in interrupted and "last checkpoint at 4" in interrupted
    assert re.search(r"validation at 4: nll \d\.\d{3}( \(best\))?, \d of 3 without a new best", interrupted)
    assert lines[("wider", 3)].rstrip().endswith("not started")
    assert " continues " in lines[("baseline_longer", 1)] and "capped run" in lines[("baseline_longer", 1)]
    assert "7 runs: 1 recorded, 1 finished, 1 trained, 1 interrupted, 1 continues, 2 not started" in text
    commands = [line.strip() for line in text.splitlines() if line.strip().startswith("mma-nmt experiment")]
    assert {(c.split("--system ")[1].split()[0], int(c.split("--seed ")[1].split()[0])) for c in commands} == {
        ("baseline", 2), ("wider", 2), ("baseline", 3), ("wider", 3), ("baseline_longer", 1)}


def test_a_run_whose_directory_is_locked_is_training_with_its_pid_and_patience(states):
    folder, paper, run_dir = states
    with RunDirectoryLock(run_dir("wider", 2)):
        line = _lines_by_run(_status(folder, paper))[("wider", 2)]
    assert f" training    PID {os.getpid()}: update 4 of 4" in line
    assert " interrupted " in _lines_by_run(_status(folder, paper))[("wider", 2)]


def test_a_continued_run_killed_before_its_first_update_is_interrupted_not_trained(states, tmp_path, monkeypatch):
    """A continuation copies the capped run's log, ``end`` event included, then trains on: killed in between, it
    resumes from the copied last.pt, so it is interrupted, not a run whose training ended."""
    folder = tmp_path / "copy"
    shutil.copytree(states[0], folder)
    paper = folder / "states"
    monkeypatch.chdir(folder)
    cell = load_experiment(paper).cell("baseline_longer", "de_en", "smoke", seed=1, runs_dir="runs")
    continue_from(capped_predecessor(cell, Path("runs")), cell.run_dir)
    line = _lines_by_run(_status(folder, paper))[("baseline_longer", 1)]
    assert " interrupted " in line and "update 4 of 8" in line and "last checkpoint at 4" in line


def test_filters_limit_the_runs_and_unknown_names_are_refused(states):
    folder, paper, _ = states
    lines = _lines_by_run(_status(folder, paper, tables=["main"], systems=["wider"]))
    assert set(lines) == {("wider", 1), ("wider", 2), ("wider", 3)}
    assert set(_lines_by_run(_status(folder, paper, seeds=[2]))) == {("baseline", 2), ("wider", 2)}
    with pytest.raises(ExperimentError, match=r"no system \['wide'\]"):
        _status(folder, paper, systems=["wide"])


def test_the_printed_command_trains_exactly_that_run(states, tmp_path, monkeypatch, capsys):
    folder = tmp_path / "copy"  # this test trains and records: on a copy, so the other tests see the states as made
    shutil.copytree(states[0], folder)
    paper = folder / "states"
    monkeypatch.chdir(folder)
    assert main(["experiment", str(paper), "--scale", "smoke", "--runs-dir", "runs", "--status", "--seed", "3",
                 "--system", "wider"]) == 0
    (command,) = [line.strip() for line in capsys.readouterr().out.splitlines()
                  if line.strip().startswith("mma-nmt experiment")]
    argv = shlex.split(command)[1:] + ["--runs-dir", "runs"]
    import mma_nmt.experiments.command as experiment_command

    trained, real = [], experiment_command.run_cells
    monkeypatch.setattr(experiment_command, "run_cells", lambda experiment, cells, *a, **k: trained.extend(
        (c.system.name, c.seed) for c in cells) or real(experiment, cells, *a, **k))
    assert main(argv) == 0
    assert trained == [("wider", 3)]
    lines = _lines_by_run(_status(folder, paper))
    assert " recorded " in lines[("wider", 3)] and " interrupted " in lines[("wider", 2)]
    assert lines[("baseline", 3)].rstrip().endswith("not started")
    assert " recorded " in lines[("wider", 1)]  # the command records the runs that finished, as it always does


def test_status_and_from_records_exclude_each_other(capsys):
    with pytest.raises(SystemExit):
        main(["experiment", "toy", "--status", "--from-records"])
    assert "not allowed with argument" in capsys.readouterr().err


def test_lock_holder_needs_a_live_flock_not_just_a_pid_file(tmp_path):
    assert lock_holder(tmp_path) is None  # no lock file
    with RunDirectoryLock(tmp_path):
        assert lock_holder(tmp_path) == os.getpid()
    assert lock_holder(tmp_path) is None  # released: the PID file stays, the flock is gone
    (tmp_path / ".lock").write_text("not a pid\n")
    assert lock_holder(tmp_path) is None
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from mma_nmt.training.run_lock import RunDirectoryLock\n"
        f"lock = RunDirectoryLock({str(tmp_path)!r}); lock.acquire(); print('held', flush=True); time.sleep(60)")],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert lock_holder(tmp_path) == holder.pid
    finally:
        holder.kill()
        holder.wait()
    assert lock_holder(tmp_path) is None
