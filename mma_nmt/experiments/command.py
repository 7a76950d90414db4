"""``mma-nmt experiment <paper> [--table T ...] --scale mini``: trains, decodes and scores every system of the chosen
tables (skipping finished runs, resuming interrupted ones) and writes each table as Markdown and JSON."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from mma_nmt.data.fileio import atomic_write_json, atomic_write_text
from mma_nmt.experiments.report import build_table, to_markdown
from mma_nmt.experiments.runner import run_cells
from mma_nmt.experiments.spec import ExperimentError, load_experiment

EXPERIMENTS_DIR = Path(__file__).resolve().parents[2] / "experiments"


def find_experiment(name: str) -> Path:
    """A path to an experiment directory or file, or the name of a folder under the repository's ``experiments/``."""
    path = Path(name)
    if path.exists():
        return path
    candidate = EXPERIMENTS_DIR / name
    if candidate.is_dir():
        return candidate
    known = sorted(p.parent.name for p in EXPERIMENTS_DIR.glob("*/experiment.toml"))
    raise ExperimentError(f"no experiment {name!r}; known: {', '.join(known) or 'none'} (or give a path)")


def run_experiment(name: str, *, tables: list[str] | None = None, scale: str = "mini", jobs: int = 1,
                   runs_dir: str | Path = "runs/experiments", results_dir: str | Path | None = None,
                   bootstrap_samples: int = 1000, command: str | None = None) -> list[Path]:
    """Runs ``tables`` (default: all) of experiment ``name`` at ``scale``; returns the Markdown reports written.
    Raises RuntimeError after writing the reports when some run failed."""
    experiment = load_experiment(find_experiment(name))
    chosen = tables or [name for name, table in experiment.tables.items() if scale in table.scales]
    cells = [cell for table in chosen for cell in experiment.cells(table, scale)]
    results, failures = run_cells(experiment, cells, Path(runs_dir), jobs=jobs)
    out_dir = Path(results_dir) if results_dir else experiment.path.parent / "results" / scale
    command = command or "mma-nmt experiment " + " ".join(shlex.quote(a) for a in sys.argv[2:])
    written = []
    for table in chosen:
        data = build_table(experiment, experiment.tables[table], scale, results, bootstrap_samples=bootstrap_samples)
        data["command"] = command
        atomic_write_json(out_dir / f"{table}.json", data)
        written.append(atomic_write_text(out_dir / f"{table}.md", to_markdown(data, command=command)))
        print(f"[experiment] wrote {written[-1]}", flush=True)
    if failures:
        raise RuntimeError("some runs failed (the tables leave them empty):\n  " + "\n  ".join(failures))
    return written
