"""Runs the cells of one or more tables: each distinct run once (finished runs are skipped, interrupted ones resume),
``jobs`` of them side by side, then writes each table's report."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from mma_nmt.data.fileio import atomic_write_json
from mma_nmt.experiments.cell import CELL_FILE, RESULT_FILE, is_finished, read_json, run_cell
from mma_nmt.experiments.continuation import capped_predecessor, continue_from, holds_run
from mma_nmt.experiments.side_by_side import run_side_by_side
from mma_nmt.experiments.spec import Experiment, ExperimentError, PlannedRun, distinct


def check_prepared_dirs(runs: list[PlannedRun]) -> None:
    """Runs that share a prepared directory must prepare it the same way (else one would overwrite the other's)."""
    seen: dict[str, tuple[PlannedRun, dict]] = {}
    for run in runs:
        data = run.run_config.data.to_section()
        out_dir = data.get("out_dir", "")
        first = seen.setdefault(out_dir, (run, data))
        if first[1] != data:
            raise ExperimentError(
                f"{first[0].system.name} and {run.system.name} on {run.dataset.role} prepare {out_dir} with "
                f"different [data] settings ({first[1]} vs {data}); give one of them its own data.out_dir")


def _write_cell_file(run: PlannedRun, experiment: Experiment) -> None:
    path = run.run_dir / CELL_FILE
    if path.is_file():
        return
    run.run_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, {"experiment": experiment.name, "system": run.system.name, "dataset": run.dataset.role,
                             "scale": run.scale, "identity": run.identity, "average_last": run.average_last,
                             "config": run.config})


def _continue_capped_runs(runs: list[PlannedRun], runs_dir: Path) -> None:
    """A run that has not started and whose config is a finished run's with a higher cap continues that run
    (:mod:`mma_nmt.experiments.continuation`)."""
    for run in runs:
        if holds_run(run.run_dir):
            continue
        predecessor = capped_predecessor(run, runs_dir)
        if predecessor is not None:
            event = continue_from(predecessor, run.run_dir)
            print(f"[experiment] {run.system.name} on {run.dataset.role} continues {predecessor} from update "
                  f"{event['step']} (the same run with the cap raised from {event['max_steps']} to "
                  f"{run.run_config.train.max_steps})", flush=True)


def _prepare_all(runs: list[PlannedRun]) -> None:
    """Prepares every distinct corpus once, before any training starts (runs side by side must not race on it)."""
    from mma_nmt import pipeline

    for run in runs:
        pipeline.ensure_prepared(run.run_config, say=lambda text: print(f"[experiment] {text}", flush=True))


Ended = Callable[..., None]  # (run, its result or None, when it started, the error or None)


def _run_here(runs: list[PlannedRun], ended: Ended) -> None:
    """One run after the other in this process, with progress bars."""
    for run in runs:
        started = time.monotonic()
        print(f"[experiment] running {run.system.name} on {run.dataset.role} in {run.run_dir}", flush=True)
        try:
            ended(run, run_cell(run.run_dir), started, None)
        except Exception as error:  # keep going: one failed system must not lose the others
            ended(run, None, started, error)


def _run_in_processes(runs: list[PlannedRun], jobs: int, ended: Ended) -> None:
    """``jobs`` runs at a time, each in its own process (its output in ``<run_dir>/run.log``)."""
    by_dir = {run.run_dir: run for run in runs}

    def process_ended(run_dir: Path, code: int | None, started: float, error: Exception | None) -> None:
        if error is None and code != 0:
            error = RuntimeError(f"run {run_dir} failed with exit code {code}; see {run_dir / 'run.log'}")
        if error is not None:
            ended(by_dir[run_dir], None, started, error)
            return
        try:
            ended(by_dir[run_dir], read_json(run_dir / RESULT_FILE), started, None)
        except Exception as failure:  # keep going, as above
            ended(by_dir[run_dir], None, started, failure)

    run_side_by_side(list(by_dir), jobs, process_ended)


def run_cells(experiment: Experiment, runs: list[PlannedRun], runs_dir: Path, *, jobs: int = 1,
              on_finished: Callable[[PlannedRun, dict], None] | None = None) -> tuple[dict[str, dict], list[str]]:
    """Runs every distinct run of ``runs``; returns the results of the finished ones by identity and the failures (a
    failed run does not stop the others). ``jobs > 1`` runs them in subprocesses (logs in ``<run_dir>/run.log``; a
    runner that is stopped takes them down with it); ``jobs == 1`` runs them here, with progress bars.
    ``on_finished(run, result)`` is called as each run finishes (the experiment command writes its record then)."""
    unique = distinct(runs)
    check_prepared_dirs(unique)
    for run in unique:
        _write_cell_file(run, experiment)
    pending = [run for run in unique if not is_finished(run.run_dir)]
    _continue_capped_runs(pending, Path(runs_dir))
    print(f"[experiment] {len(unique)} runs, {len(unique) - len(pending)} already finished, {len(pending)} to run "
          f"({jobs} at a time) under {Path(runs_dir) / runs[0].scale if runs else runs_dir}", flush=True)
    _prepare_all(pending)
    failures = []

    def ended(run: PlannedRun, result: dict | None, started: float, error: Exception | None) -> None:
        what = f"{run.system.name} on {run.dataset.role}"
        if error is not None:
            failures.append(f"{what}: {error}")
            print(f"[experiment] FAILED {what}: {error}", flush=True)
            return
        print(f"[experiment] done {what}: BLEU {result['bleu']:.2f} in {(time.monotonic() - started) / 60:.1f} "
              f"min ({run.run_dir})", flush=True)
        if on_finished is not None:
            on_finished(run, result)

    if jobs <= 1:
        _run_here(pending, ended)
    else:
        _run_in_processes(pending, jobs, ended)
    results = {run.identity: {**read_json(run.run_dir / RESULT_FILE), "run_dir": str(run.run_dir)}
               for run in unique if is_finished(run.run_dir)}
    return results, failures
