"""``mma-nmt experiment <paper> [--table T ...] --scale mini``: trains, decodes and scores every system of the chosen
tables (skipping runs that have a record, resuming interrupted ones), writes a record per finished run, and writes
each table as Markdown, JSON and a learning-curve figure, built from the records alone.

``--from-records`` rebuilds the tables from the records without training anything (it first records the runs that
finished under the runs directory, e.g. while other runs of the table still train). ``--status`` trains and writes
nothing: it says where each run stands and how to train the missing ones (:mod:`mma_nmt.experiments.status`)."""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path

from mma_nmt.data.fileio import atomic_write_json, atomic_write_text
from mma_nmt.experiments.records import load_records, write_record
from mma_nmt.experiments.losses import lost_numbers
from mma_nmt.experiments.report import build_table, to_markdown
from mma_nmt.experiments.runner import run_cells
from mma_nmt.experiments.spec import Experiment, ExperimentError, load_experiment

EXPERIMENTS_DIR = Path(__file__).resolve().parents[2] / "experiments"


def find_experiment(name: str) -> Path:
    """A path to an experiment directory or file, or the name of a folder under the repository's ``experiments/``."""
    path = Path(name)
    if path.exists():
        return path
    if not EXPERIMENTS_DIR.is_dir():  # an installed wheel: the papers' experiments live in the repository only
        raise ExperimentError(f"no experiment {name!r}: mma-nmt experiment needs a source checkout of mma_nmt (its "
                              f"experiments/ folder; none at {EXPERIMENTS_DIR}): clone the repository and run it there, "
                              f"or give the path of an experiment folder")
    candidate = EXPERIMENTS_DIR / name
    if candidate.is_dir():
        return candidate
    known = sorted(p.parent.name for p in EXPERIMENTS_DIR.glob("*/experiment.toml"))
    raise ExperimentError(f"no experiment {name!r}; known: {', '.join(known) or 'none'} (or give a path)")


def experiment_named(name: str) -> Experiment:
    """The validated experiment :func:`find_experiment` finds for ``name``."""
    return load_experiment(find_experiment(name))


def collect_records(cells: list, runs_dir: Path, records_root: Path) -> dict[str, dict]:
    """Writes the record of every cell whose run finished under ``runs_dir`` but has no record yet (so finished runs
    are kept while others still train, or after a table run was interrupted); returns all records by identity."""
    from mma_nmt.experiments.cell import RESULT_FILE, is_finished, read_json
    from mma_nmt.experiments.runner import run_dir_for

    records = load_records(records_root)
    for cell in {cell.identity: cell for cell in cells}.values():
        run_dir = run_dir_for(cell, runs_dir)
        if cell.identity not in records and is_finished(run_dir):
            write_record(cell, run_dir, read_json(run_dir / RESULT_FILE), records_root)
    return load_records(records_root)


def _lost_numbers(path: Path, data: dict) -> list[str]:
    """What the table at ``path`` publishes today that ``data`` would not (:func:`~.losses.lost_numbers`)."""
    if not path.is_file():
        return []
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        return [f"whatever {path} holds (it cannot be read: {error})"]
    return lost_numbers(old, data)


def _with_relative_hypotheses(data: dict, out_dir: Path) -> dict:
    """``data`` with each run's translations named relative to the table's folder, so that a committed table names
    no path of the machine that wrote it and stays the same wherever it is rebuilt."""
    runs = [{**run, "hypotheses": os.path.relpath(run["hypotheses"], out_dir)} if run.get("hypotheses") else run
            for run in data.get("runs", [])]
    return {**data, "runs": runs}


def _write_table(out_dir: Path, data: dict, command: str, *,
                 allow_fewer: bool = False) -> tuple[Path | None, str | None]:
    """Writes the table's Markdown, JSON and learning curves; refuses (returns the reason) when the table would publish
    fewer seeds, runs or significance daggers than it does today (:mod:`~.losses`), unless ``allow_fewer``."""
    from mma_nmt.experiments.curves import plot_learning_curves

    name = data["table"]
    lost = _lost_numbers(out_dir / f"{name}.json", data)
    if lost and not allow_fewer:
        return None, (f"{out_dir / (name + '.md')} not rewritten: it publishes {'; '.join(lost)} (a run failed or is "
                      f"not finished, its record was removed, or its config changed); finish or restore those runs, "
                      f"or pass --allow-fewer to publish the table with less")
    if lost:
        print(f"[experiment] {out_dir / (name + '.md')} publishes less than before (--allow-fewer): {'; '.join(lost)}",
              flush=True)
    data["command"] = command
    atomic_write_json(out_dir / f"{name}.json", _with_relative_hypotheses(data, out_dir))
    figure = plot_learning_curves(data, out_dir / f"{name}.curves.png")
    markdown = to_markdown(data, command=command)
    if figure is not None:
        markdown += f"\n![learning curves]({figure.name})\n"
    return atomic_write_text(out_dir / f"{name}.md", markdown), None


def _run_order(experiment, tables: list[str]):
    """Seed by seed, and within a seed the rows a table compares over seeds (its baseline and proposed system) before
    the rows trained once, so that each finished pair of runs is a comparison as early as possible."""
    compared = {row for name in tables for row in experiment.tables[name].seed_rows}
    return lambda cell: (cell.seed, cell.system.name not in compared)


def _check_known(kind: str, asked: list | None, known: set, paper: str, tables: list[str]) -> None:
    unknown = sorted(set(asked or []) - known)
    if unknown:
        raise ExperimentError(f"no {kind} {unknown} in {paper}'s table(s) {', '.join(tables)}; {kind}s there: "
                              f"{', '.join(str(k) for k in sorted(known))}")


def _chosen_tables(experiment: Experiment, tables: list[str] | None, scale: str) -> list[str]:
    return tables or [name for name, table in experiment.tables.items() if scale in table.scales]


def _results_dir(experiment: Experiment, scale: str, results_dir: str | Path | None) -> Path:
    return Path(results_dir) if results_dir else experiment.path.parent / "results" / scale


def _selection(experiment: Experiment, chosen: list[str], cells: list, datasets: list[str] | None,
               systems: list[str] | None, seeds: list[int] | None):
    """Whether a cell is of the asked columns, rows and seeds (refusing, with what exists, a name none of ``cells``
    has)."""
    _check_known("dataset", datasets, {cell.dataset.role for cell in cells}, experiment.name, chosen)
    _check_known("system", systems, {cell.system.name for cell in cells}, experiment.name, chosen)
    _check_known("seed", seeds, {cell.seed for cell in cells}, experiment.name, chosen)
    return lambda cell: ((not datasets or cell.dataset.role in datasets)
                         and (not systems or cell.system.name in systems) and (not seeds or cell.seed in seeds))


def experiment_status(name: str, *, tables: list[str] | None = None, scale: str = "mini",
                      runs_dir: str | Path = "runs/experiments", results_dir: str | Path | None = None,
                      datasets: list[str] | None = None, systems: list[str] | None = None,
                      seeds: list[int] | None = None) -> str:
    """Where each run of ``tables`` (default: all) stands (:mod:`mma_nmt.experiments.status`), limited to the asked
    columns, rows and seeds; trains and writes nothing."""
    from mma_nmt.experiments.status import format_status, table_status

    experiment = experiment_named(name)
    chosen = _chosen_tables(experiment, tables, scale)
    cells = {table: experiment.cells(table, scale) for table in chosen}
    asked = _selection(experiment, chosen, [cell for table_cells in cells.values() for cell in table_cells],
                       datasets, systems, seeds)
    cells = {table: [cell for cell in table_cells if asked(cell)] for table, table_cells in cells.items()}
    records_root = _results_dir(experiment, scale, results_dir) / "runs"
    return format_status(name, table_status(cells, Path(runs_dir), records_root))  # commands name it as given


def run_experiment(name: str, *, tables: list[str] | None = None, scale: str = "mini", jobs: int = 1,
                   runs_dir: str | Path = "runs/experiments", results_dir: str | Path | None = None,
                   bootstrap_samples: int = 10000, command: str | None = None,
                   from_records: bool = False, datasets: list[str] | None = None,
                   systems: list[str] | None = None, seeds: list[int] | None = None,
                   allow_fewer: bool = False) -> list[Path]:
    """Runs ``tables`` (default: all) of experiment ``name`` at ``scale``; returns the Markdown reports written.
    Records go to ``<results_dir>/runs`` (default results dir: ``experiments/<paper>/results/<scale>``). Raises
    RuntimeError after writing what it can when some run failed or a table was not rewritten because it would publish
    fewer seeds, runs or significance daggers than it does (:mod:`~.losses`; ``allow_fewer`` writes it anyway).
    ``datasets`` and ``systems`` limit the training to those columns and rows (the tables are still written with
    every cell that has records), e.g. to train the seeds of a table's compared pair before its other rows; ``seeds`` likewise limits it
    to those seeds (e.g. one seed's baseline and proposed system on one machine, the next seed's on another)."""
    experiment = experiment_named(name)
    chosen = _chosen_tables(experiment, tables, scale)
    cells = [cell for table in chosen for cell in experiment.cells(table, scale)]
    out_dir = _results_dir(experiment, scale, results_dir)
    records_root = out_dir / "runs"
    records = collect_records(cells, Path(runs_dir), records_root)
    failures = []
    if not from_records:
        asked = _selection(experiment, chosen, cells, datasets, systems, seeds)
        pending = [cell for cell in cells if asked(cell) and cell.identity not in records]
        pending.sort(key=_run_order(experiment, chosen))
        if pending:
            _, failures = run_cells(experiment, pending, Path(runs_dir), jobs=jobs,
                                    on_finished=lambda cell, run_dir, result: write_record(cell, run_dir, result,
                                                                                           records_root))
        records = load_records(records_root)
    command = command or "mma-nmt experiment " + " ".join(shlex.quote(a) for a in sys.argv[2:])
    written, refused = [], []
    for table in chosen:
        data = build_table(experiment, experiment.tables[table], scale, records, bootstrap_samples=bootstrap_samples)
        path, reason = _write_table(out_dir, data, command, allow_fewer=allow_fewer)
        if path is None:
            refused.append(reason)
            print(f"[experiment] {reason}", flush=True)
        else:
            written.append(path)
            print(f"[experiment] wrote {path}", flush=True)
    problems = failures + refused
    if refused and not failures and len(refused) == 1:  # one line on the command line
        raise RuntimeError(refused[0])
    if problems:
        raise RuntimeError("\n  ".join(["some runs failed or tables were kept as they were:", *problems]))
    return written
