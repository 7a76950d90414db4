"""``mma-nmt experiment <paper> [--table T ...] --scale mini``: trains, decodes and scores every system of the chosen
tables (skipping runs that have a record, resuming interrupted ones), writes a record per finished run, and writes
each table as Markdown, JSON and a learning-curve figure, built from the records alone.

``--from-records`` rebuilds the tables from the records without training anything (it first records the runs that
finished under the runs directory, e.g. while other runs of the table still train). ``--status`` trains and writes
nothing: it says where each run stands and how to train the missing ones (:mod:`mma_nmt.experiments.status`).

Each command reads the paper's recipe once (:func:`~mma_nmt.experiments.spec.load_experiment`) and resolves every run
of its tables once (:meth:`~mma_nmt.experiments.spec.Experiment.plan`); the runner, the records, the status and the
tables all read those planned runs."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from mma_nmt.experiments.records import load_records, write_record
from mma_nmt.experiments.report import build_table, write_table
from mma_nmt.experiments.runner import RESULT_FILE, is_finished, read_json, run_cells
from mma_nmt.experiments.spec import RUNS_DIR, Experiment, ExperimentError, Plan, PlannedRun, distinct, load_experiment
from mma_nmt.experiments.status import format_status, table_status

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


def _plan(experiment: Experiment, tables: list[str] | None, scale: str, runs_dir: str | Path) -> Plan:
    """The runs of ``tables`` (default: every table that runs at ``scale``)."""
    chosen = tables or [name for name, table in experiment.tables.items() if scale in table.scales]
    return experiment.plan(chosen, scale, runs_dir)


def _results_dir(experiment: Experiment, scale: str, results_dir: str | Path | None) -> Path:
    return Path(results_dir) if results_dir else experiment.path.parent / "results" / scale


def _check_known(kind: str, asked: list | None, known: set, plan: Plan) -> None:
    unknown = sorted(set(asked or []) - known)
    if unknown:
        raise ExperimentError(f"no {kind} {unknown} in {plan.experiment.name}'s table(s) {', '.join(plan.tables)}; "
                              f"{kind}s there: {', '.join(str(k) for k in sorted(known))}")


def _selected(plan: Plan, datasets: list[str] | None, systems: list[str] | None,
              seeds: list[int] | None) -> list[PlannedRun]:
    """The runs of ``plan`` of the asked columns, rows and seeds (refusing, with what exists, a name no run has)."""
    runs = plan.runs
    _check_known("dataset", datasets, {run.dataset.role for run in runs}, plan)
    _check_known("system", systems, {run.system.name for run in runs}, plan)
    _check_known("seed", seeds, {run.seed for run in runs}, plan)
    return [run for run in runs if (not datasets or run.dataset.role in datasets)
            and (not systems or run.system.name in systems) and (not seeds or run.seed in seeds)]


def _run_order(plan: Plan):
    """Seed by seed, and within a seed the rows a table compares over seeds (its baseline and proposed system) before
    the rows trained once, so that each finished pair of runs is a comparison as early as possible."""
    compared = {row for name in plan.tables for row in plan.experiment.tables[name].seed_rows}
    return lambda run: (run.seed, run.system.name not in compared)


def collect_records(runs: list[PlannedRun], records_root: Path) -> dict[str, dict]:
    """Writes the record of every run that finished in its run directory but has no record yet (so finished runs are
    kept while others still train, or after a table run was interrupted); returns all records by identity."""
    records = load_records(records_root)
    for run in distinct(runs):
        if run.identity not in records and is_finished(run.run_dir):
            write_record(run, read_json(run.run_dir / RESULT_FILE), records_root)
    return load_records(records_root)


def _train_missing(plan: Plan, runs: list[PlannedRun], records: dict[str, dict], records_root: Path,
                   jobs: int) -> list[str]:
    """Trains the runs of ``runs`` that have no record (in :func:`_run_order`), recording each in ``records_root`` as
    it finishes; returns the failures."""
    pending = sorted((run for run in runs if run.identity not in records), key=_run_order(plan))
    if not pending:
        return []
    _, failures = run_cells(plan.experiment, pending, plan.runs_dir, jobs=jobs,
                            on_finished=lambda run, result: write_record(run, result, records_root))
    return failures


def _write_tables(plan: Plan, records: dict[str, dict], out_dir: Path, command: str, *, bootstrap_samples: int,
                  allow_fewer: bool) -> tuple[list[Path], list[str]]:
    """Writes every table of ``plan`` (:func:`~mma_nmt.experiments.report.write_table`); returns the Markdown files
    written and the reasons of the tables kept as they were."""
    written, refused = [], []
    for name in plan.tables:
        data = build_table(plan, name, records, bootstrap_samples=bootstrap_samples)
        path, reason = write_table(out_dir, data, command, allow_fewer=allow_fewer)
        if path is None:
            refused.append(reason)
            print(f"[experiment] {reason}", flush=True)
        else:
            written.append(path)
            print(f"[experiment] wrote {path}", flush=True)
    return written, refused


def experiment_status(name: str, *, tables: list[str] | None = None, scale: str = "mini",
                      runs_dir: str | Path = RUNS_DIR, results_dir: str | Path | None = None,
                      datasets: list[str] | None = None, systems: list[str] | None = None,
                      seeds: list[int] | None = None) -> str:
    """Where each run of ``tables`` (default: all) stands (:mod:`mma_nmt.experiments.status`), limited to the asked
    columns, rows and seeds; trains and writes nothing."""
    experiment = experiment_named(name)
    plan = _plan(experiment, tables, scale, runs_dir)
    runs = _selected(plan, datasets, systems, seeds)
    records = load_records(_results_dir(experiment, scale, results_dir) / "runs")
    return format_status(name, table_status(runs, plan.runs_dir, records))  # commands name it as given


def run_experiment(name: str, *, tables: list[str] | None = None, scale: str = "mini", jobs: int = 1,
                   runs_dir: str | Path = RUNS_DIR, results_dir: str | Path | None = None,
                   bootstrap_samples: int = 10000, command: str | None = None,
                   from_records: bool = False, datasets: list[str] | None = None,
                   systems: list[str] | None = None, seeds: list[int] | None = None,
                   allow_fewer: bool = False) -> list[Path]:
    """Runs ``tables`` (default: all) of experiment ``name`` at ``scale``; returns the Markdown reports written.
    Records go to ``<results_dir>/runs`` (default results dir: ``experiments/<paper>/results/<scale>``). Raises
    RuntimeError after writing what it can when some run failed or a table was not rewritten because it would publish
    fewer seeds, runs or significance daggers than it does (:func:`~mma_nmt.experiments.report.lost_numbers`;
    ``allow_fewer`` writes it anyway). ``datasets`` and ``systems`` limit the training to those columns and rows (the
    tables are still written with every cell that has records), e.g. to train the seeds of a table's compared pair
    before its other rows; ``seeds`` likewise limits it to those seeds (e.g. one seed's baseline and proposed system
    on one machine, the next seed's on another)."""
    experiment = experiment_named(name)
    plan = _plan(experiment, tables, scale, runs_dir)
    out_dir = _results_dir(experiment, scale, results_dir)
    records = collect_records(plan.runs, out_dir / "runs")
    failures = []
    if not from_records:
        failures = _train_missing(plan, _selected(plan, datasets, systems, seeds), records, out_dir / "runs", jobs)
        records = load_records(out_dir / "runs")
    command = command or "mma-nmt experiment " + " ".join(shlex.quote(a) for a in sys.argv[2:])
    written, refused = _write_tables(plan, records, out_dir, command, bootstrap_samples=bootstrap_samples,
                                     allow_fewer=allow_fewer)
    problems = failures + refused
    if refused and not failures and len(refused) == 1:  # one line on the command line
        raise RuntimeError(refused[0])
    if problems:
        raise RuntimeError("\n  ".join(["some runs failed or tables were kept as they were:", *problems]))
    return written
