"""Runs the cells of one or more tables: each distinct run once (finished runs are skipped, interrupted ones resume),
``jobs`` of them side by side, then writes each table's report."""

from __future__ import annotations

import time
from pathlib import Path

from mma_nmt.data.fileio import atomic_write_json
from mma_nmt.experiments.cell import CELL_FILE, RESULT_FILE, is_finished, read_json, run_cell
from mma_nmt.experiments.continuation import capped_predecessor, continue_from, holds_run
from mma_nmt.experiments.side_by_side import run_side_by_side
from mma_nmt.experiments.spec import Cell, Experiment, ExperimentError, resolved_run_config


def run_dir_for(cell: Cell, runs_dir: Path) -> Path:
    """``<runs_dir>/<scale>/<corpus>/<system>-<identity>``; an existing directory of the same identity (the same run
    under another system name, e.g. another paper's baseline) is reused."""
    scale_dir = Path(runs_dir) / cell.scale
    existing = sorted(scale_dir.glob(f"*/*-{cell.identity}"))
    if existing:
        return existing[0]
    corpus = cell.config.get("data", {}).get("corpus", "corpus")
    return scale_dir / corpus / f"{cell.system.name}-{cell.identity}"


def _write_cell_file(cell: Cell, run_dir: Path, experiment: Experiment) -> None:
    path = run_dir / CELL_FILE
    if path.is_file():
        return
    run_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, {"experiment": experiment.name, "system": cell.system.name,
                             "dataset": cell.dataset.role, "scale": cell.scale, "identity": cell.identity,
                             "average_last": cell.average_last, "config": cell.config})


def check_prepared_dirs(cells: list[Cell]) -> None:
    """Runs that share a prepared directory must prepare it the same way (else one would overwrite the other's)."""
    seen: dict[str, tuple[Cell, dict]] = {}
    for cell in cells:
        data = cell.config.get("data", {})
        out_dir = data.get("out_dir", "")
        first = seen.setdefault(out_dir, (cell, data))
        if first[1] != data:
            raise ExperimentError(
                f"{first[0].system.name} and {cell.system.name} on {cell.dataset.role} prepare {out_dir} with "
                f"different [data] settings ({first[1]} vs {data}); give one of them its own data.out_dir")


def _continue_capped_runs(cells: list[Cell], run_dirs: dict[str, Path], runs_dir: Path) -> None:
    """A cell that has not started and whose config is a finished run's with a higher cap continues that run
    (:mod:`mma_nmt.experiments.continuation`)."""
    for cell in cells:
        run_dir = run_dirs[cell.identity]
        if holds_run(run_dir):
            continue
        predecessor = capped_predecessor(cell, runs_dir)
        if predecessor is not None:
            event = continue_from(predecessor, run_dir)
            print(f"[experiment] {cell.system.name} on {cell.dataset.role} continues {predecessor} from update "
                  f"{event['step']} (the same run with the cap raised from {event['max_steps']} to "
                  f"{cell.config['train']['max_steps']})", flush=True)


def _prepare_all(cells: list[Cell], run_dirs: dict[str, Path]) -> None:
    """Prepares every distinct corpus once, before any training starts (runs side by side must not race on it)."""
    from mma_nmt import pipeline

    for cell in cells:
        pipeline.ensure_prepared(resolved_run_config(cell, run_dirs[cell.identity]),
                                 say=lambda text: print(f"[experiment] {text}", flush=True))


def run_cells(experiment: Experiment, cells: list[Cell], runs_dir: Path, *, jobs: int = 1,
              on_finished=None) -> tuple[dict[str, dict], list[str]]:
    """Runs every distinct cell; returns the results of the finished ones by identity and the failures (a failed run
    does not stop the others). ``jobs > 1`` runs cells in subprocesses (logs in ``<run_dir>/run.log``; a runner
    that is stopped takes them down with it); ``jobs == 1`` runs them here, with progress bars.
    ``on_finished(cell, run_dir, result)`` is called as each run finishes (the experiment command writes its record
    then)."""
    unique = list({cell.identity: cell for cell in cells}.values())
    check_prepared_dirs(unique)
    run_dirs = {cell.identity: run_dir_for(cell, runs_dir) for cell in unique}
    for cell in unique:
        _write_cell_file(cell, run_dirs[cell.identity], experiment)
    pending = [cell for cell in unique if not is_finished(run_dirs[cell.identity])]
    _continue_capped_runs(pending, run_dirs, Path(runs_dir))
    print(f"[experiment] {len(unique)} runs, {len(unique) - len(pending)} already finished, {len(pending)} to run "
          f"({jobs} at a time) under {Path(runs_dir) / cells[0].scale if cells else runs_dir}", flush=True)
    _prepare_all(pending, run_dirs)
    failures = []

    def report(cell: Cell, result: dict | None, started: float, error: Exception | None = None) -> None:
        what = f"{cell.system.name} on {cell.dataset.role}"
        if error is not None:
            failures.append(f"{what}: {error}")
            print(f"[experiment] FAILED {what}: {error}", flush=True)
        else:
            print(f"[experiment] done {what}: BLEU {result['bleu']:.2f} in {(time.monotonic() - started) / 60:.1f} "
                  f"min ({run_dirs[cell.identity]})", flush=True)
            if on_finished is not None:
                on_finished(cell, run_dirs[cell.identity], result)

    if jobs <= 1:
        for cell in pending:
            started = time.monotonic()
            print(f"[experiment] running {cell.system.name} on {cell.dataset.role} in {run_dirs[cell.identity]}",
                  flush=True)
            try:
                report(cell, run_cell(run_dirs[cell.identity]), started)
            except Exception as error:  # keep going: one failed system must not lose the others
                report(cell, None, started, error)
    else:
        cells_by_dir = {run_dirs[cell.identity]: cell for cell in pending}

        def ended(run_dir: Path, code: int | None, started: float, error: Exception | None) -> None:
            cell = cells_by_dir[run_dir]
            if error is None and code != 0:
                error = RuntimeError(f"run {run_dir} failed with exit code {code}; see {run_dir / 'run.log'}")
            if error is not None:
                report(cell, None, started, error)
                return
            try:
                report(cell, read_json(run_dir / RESULT_FILE), started)
            except Exception as failure:  # keep going, as above
                report(cell, None, started, failure)

        run_side_by_side(list(cells_by_dir), jobs, ended)
    results = {cell.identity: {**read_json(run_dirs[cell.identity] / RESULT_FILE),
                               "run_dir": str(run_dirs[cell.identity])}
               for cell in unique if is_finished(run_dirs[cell.identity])}
    return results, failures
