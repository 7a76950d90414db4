"""What every ``experiments/<paper>/analysis.py`` shares: its command line, the folder it writes to, and the trained
models of a table it reads (force-decoded on the test set).

    parser = analysis_parser(__doc__, dataset="de_en")
    args = parser.parse_args(argv)
    trained = load_trained("mma", "mma", args)
    records, test = force_decoded(trained, args.sentences)

``trained_cell("mma", "mma", "de_en", scale="mini")`` finds the run of that system on that dataset (its run directory
under ``runs/experiments``, and the checkpoint its record says was translated) and loads the model with its test split.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from mma_nmt.data import ParallelDataset
from mma_nmt.data.fileio import atomic_write_text
from mma_nmt.evaluation.force_decode import force_decode_sentences
from mma_nmt.experiments.command import experiment_named
from mma_nmt.experiments.records import load_records
from mma_nmt.experiments.runner import RESULT_FILE, is_finished, read_json
from mma_nmt.experiments.spec import RUNS_DIR, Experiment, PlannedRun
from mma_nmt.training.checkpoint import load_model


@dataclass
class TrainedCell:
    """The trained model behind a table cell."""

    cell: PlannedRun
    run_dir: Path
    checkpoint: Path
    model: nn.Module  # eval mode, CPU
    record: dict | None  # the run record, when the cell has one

    def dataset(self, split: str | None = None):
        run = self.cell.run_config
        return ParallelDataset.load(run.prepared_dir(), split or run.eval.split)


def trained_cell(experiment: str | Experiment, system: str, dataset: str, *, scale: str = "mini",
                 seed: int | None = None, runs_dir: str | Path = RUNS_DIR,
                 results_dir: str | Path | None = None) -> TrainedCell:
    """Loads the model of one cell of ``experiment`` (a name or path, or the experiment read already); raises
    FileNotFoundError naming the command that trains it when it is absent."""
    spec = experiment if isinstance(experiment, Experiment) else experiment_named(experiment)
    cell = spec.cell(system, dataset, scale, seed=seed, runs_dir=runs_dir)
    results = Path(results_dir) if results_dir else spec.path.parent / "results" / scale
    record = load_records(results / "runs").get(cell.identity)
    train_it = (f"train it with `mma-nmt experiment {spec.name} --scale {scale} --dataset {dataset}` (the table that "
                f"holds it)")
    if record is None and not is_finished(cell.run_dir):  # a run still training has checkpoints, but no final model
        raise FileNotFoundError(f"no trained model for {system} seed {cell.seed} on {dataset} at scale {scale}: "
                                f"{cell.run_dir} has not finished (no {RESULT_FILE}, no run record); {train_it}")
    translated_with = (record["stopping"] if record else read_json(cell.run_dir / RESULT_FILE)).get("checkpoint",
                                                                                                    "best.pt")
    checkpoint = cell.run_dir / translated_with
    if not checkpoint.is_file():
        raise FileNotFoundError(f"no trained model for {system} on {dataset} at scale {scale} ({checkpoint} is "
                                f"missing); {train_it}")
    model, _ = load_model(checkpoint)
    return TrainedCell(cell=cell, run_dir=cell.run_dir, checkpoint=checkpoint, model=model.eval(), record=record)


def analysis_parser(doc: str, *, dataset: str, sentences: int = 300) -> argparse.ArgumentParser:
    """``--scale``, ``--dataset``, ``--sentences``, ``--runs-dir`` and ``--results-dir``; ``doc``'s first line is the
    description."""
    parser = argparse.ArgumentParser(description=doc.strip().split("\n")[0])
    parser.add_argument("--scale", default="mini")
    parser.add_argument("--dataset", default=dataset, help=f"the table column (default {dataset})")
    parser.add_argument("--sentences", type=int, default=sentences, help="test sentences force-decoded")
    parser.add_argument("--runs-dir", default="runs/experiments")
    parser.add_argument("--results-dir", help="default: experiments/<paper>/results/<scale>")
    parser.add_argument("--converged", action="store_true",
                        help=f"analyse the models of the paper's convergence table (each system X as "
                             f"X{CONVERGED_SUFFIX}, trained until patience stopped it) instead of those of its "
                             f"table; writes to analysis/converged/")
    parser.add_argument("--output-dir", help="where the report and figures go (default: <results dir>/analysis, "
                                             "or analysis/converged with --converged)")
    return parser


# The convergence table of each paper names a system X trained until patience stops it X_to_patience.
CONVERGED_SUFFIX = "_to_patience"


def _analysed(table: str, system: str, args: argparse.Namespace) -> tuple[str, str]:
    """The (table, system) whose models are analysed: ``system`` of ``table``, or with ``--converged`` its copy in
    the convergence table."""
    return ("convergence", system + CONVERGED_SUFFIX) if args.converged else (table, system)


def output_dir(args: argparse.Namespace, script: str | Path) -> Path:
    """``--output-dir``, else ``<results dir>/analysis`` (``analysis/converged`` with ``--converged``), the results
    dir defaulting to ``results/<scale>`` beside the paper's script."""
    if args.output_dir:
        return Path(args.output_dir)
    results = Path(args.results_dir) if args.results_dir else Path(script).resolve().parent / "results" / args.scale
    return results / "analysis" / ("converged" if args.converged else "")


def command_line(script: str | Path, args: argparse.Namespace) -> str:
    """The command that wrote a report, for the report to name."""
    return (f"python experiments/{Path(script).resolve().parent.name}/analysis.py --scale {args.scale}"
            + (" --converged" if args.converged else "")
            + (f" --output-dir {args.output_dir}" if args.output_dir else ""))


def data_of(paper: str, args: argparse.Namespace) -> str:
    """The data ``args.dataset``'s column trains and tests on at ``args.scale``, as the tables name it ("Multi30k
    En-De (for IWSLT'15 En-Vi)"), for a report's heading: the column's key names the paper's corpus, not ours."""
    datasets = experiment_named(paper).datasets
    if args.dataset not in datasets:
        raise ValueError(f"{paper} has no dataset {args.dataset!r}; its columns: {sorted(datasets)}")
    return datasets[args.dataset].data_label(args.scale)


def models_of(table: str, args: argparse.Namespace) -> str:
    """Where a report's models come from, for its text: "the main table's models" or the convergence table's."""
    return ("the convergence table's models (trained until patience stopped them)" if args.converged
            else f"the {table} table's models")


def load_trained(paper: str | Experiment, system: str, args: argparse.Namespace, *,
                 seed: int | None = None) -> TrainedCell:
    """The trained model of ``system`` in ``args.dataset``'s column of ``paper`` (a name, or the experiment read
    already) (the table's seed ``seed``, default the recipe's; with ``--converged`` the model of ``system`` trained
    until patience stopped it)."""
    _, system = _analysed("main", system, args)
    return trained_cell(paper, system, args.dataset, scale=args.scale, seed=seed, runs_dir=args.runs_dir,
                        results_dir=args.results_dir)


def trained_seeds(paper: str, table: str, system: str, args: argparse.Namespace
                  ) -> tuple[list[TrainedCell], list[int | None]]:
    """The trained model of every seed ``table`` trains ``system`` with at ``args.scale`` (with ``--converged``: the
    convergence table's ``system`` trained until patience), and the seeds not trained yet (reports name them); raises
    FileNotFoundError when none is trained."""
    experiment = experiment_named(paper)
    table, analysed = _analysed(table, system, args)
    seeds = experiment.tables[table].seeds_at(args.scale, analysed)
    found, missing, error = [], [], None
    for seed in seeds:
        try:
            found.append(load_trained(experiment, system, args, seed=seed))
        except FileNotFoundError as absent:
            missing.append(seed)
            error = absent
    if not found:
        raise error
    return found, missing


def missing_models_note(missing: dict[str, list[int | None]]) -> str:
    """The sentence a report adds for the seeds of each system that :func:`trained_seeds` found no model of ("" when
    every model is there): a seed's model may be missing because it was not trained, or trained on another machine."""
    lacking = "; ".join(f"{system} seeds {seeds}" for system, seeds in missing.items() if seeds)
    return f" No model on this machine (not trained, or trained elsewhere): {lacking}." if lacking else ""


def with_rows_measured_elsewhere(path: Path, measured: list[dict], paper: str, table: str,
                                 missing: dict[str, list[int | None]], args: argparse.Namespace) -> list[dict]:
    """``measured`` (one dict per row of a report, each naming its model's ``system``, ``seed`` and run ``identity``,
    as :func:`describe` does) plus the rows an earlier run of the report wrote to ``path`` for the models of
    ``missing`` (system -> seeds with no model on this machine, from :func:`trained_seeds`), marked
    ``measured_elsewhere``; writes them all back to ``path`` (JSON). An earlier row is kept only while the table still
    names the very run it measured (the same identity), so a report analysed on several machines keeps every seed
    instead of losing those whose models stayed behind, and a retrained or reconfigured run drops its old rows. Rows
    measured with other settings (``--sentences``, say) are not mixed in: they are dropped, and the command says so."""
    spec = experiment_named(paper)
    elsewhere = {spec.cell(_analysed(table, system, args)[1], args.dataset, args.scale, seed=seed).identity
                 for system, seeds in missing.items() for seed in seeds}
    settings = measurement_settings(args)
    earlier = json.loads(path.read_text()) if path.is_file() else {"settings": settings, "rows": []}
    kept = [{**row, "measured_elsewhere": True} for row in earlier["rows"] if row.get("identity") in elsewhere]
    if kept and earlier.get("settings") != settings:
        print(f"[analysis] not keeping {len(kept)} rows of {path}: they were measured with {earlier.get('settings')}, "
              f"this run with {settings}", file=sys.stderr)
        kept = []
    rows = sorted(measured + kept, key=lambda row: (row["system"], row["seed"] or 0))  # stable: a model's rows in order
    atomic_write_text(path, json.dumps({"settings": settings, "rows": rows}, indent=1) + "\n")
    return rows


# Options that say where things are, not what an analysis measures.
_PLACE_OPTIONS = {"runs_dir", "results_dir", "output_dir", "gold"}


def measurement_settings(args: argparse.Namespace) -> dict:
    """The options of an analysis command that decide what it measures (scale, dataset, sentences, ...)."""
    return {name: value for name, value in sorted(vars(args).items()) if name not in _PLACE_OPTIONS}


def seed_text(row: dict) -> str:
    """A row's seed in a report table, starred when :func:`with_rows_measured_elsewhere` kept it from an earlier run."""
    return f"{row['seed']}*" if row.get("measured_elsewhere") else str(row["seed"])


def elsewhere_note(rows: list[dict]) -> list[str]:
    """The report lines that explain :func:`seed_text`'s star, when a row has one (else none)."""
    if not any(row.get("measured_elsewhere") for row in rows):
        return []
    return ["", "*: measured by an earlier run of this command on a machine that had the model, which this one has "
                "not; kept from the rows file beside this report while the table still names that run."]


def force_decoded(trained: TrainedCell, sentences: int) -> tuple[list, object]:
    """The :class:`~mma_nmt.models.recording.SentenceRecord` of each of the first ``sentences`` test pairs (the
    reference teacher-forced) and the test split."""
    test = trained.dataset()
    count = min(sentences, len(test))
    torch.manual_seed(0)
    return list(force_decode_sentences(trained.model, test.src[:count], test.tgt[:count])), test


def describe(trained: TrainedCell, *, metric: str = "bleu") -> dict:
    """What a report says about the model it analysed: system, seed, test BLEU (``metric``: the table's, ``"bleu"``
    for sacreBLEU or ``"tokenized_bleu"``), stopping point, checkpoint."""
    record = trained.record or {}
    return {"system": trained.cell.system.name, "seed": trained.cell.seed, "identity": trained.cell.identity,
            "bleu": record.get("metrics", {}).get(metric), "stopped": record.get("stopping"),
            "checkpoint": str(trained.checkpoint)}


def mean_sd(values: list[float]) -> str:
    """``values``' mean ± sample standard deviation to two decimals (the value alone when there is one)."""
    if len(values) < 2:
        return f"{values[0]:.2f}"
    return f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}"


def bleu_text(about: dict) -> str:
    return f"{about['bleu']:.2f}" if about.get("bleu") is not None else "–"
