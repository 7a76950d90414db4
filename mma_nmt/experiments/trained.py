"""The trained model behind a table cell, for the analysis scripts of ``experiments/<paper>/``.

``trained_cell("mma", "mma", "de_en", scale="mini")`` finds the run of that system on that dataset (its run
directory under ``runs/experiments``, and the checkpoint its record says was translated) and loads the model with
its test split.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from torch import nn

from mma_nmt.experiments.spec import RUNS_DIR, Experiment, PlannedRun


@dataclass
class TrainedCell:
    cell: PlannedRun
    run_dir: Path
    checkpoint: Path
    model: nn.Module  # eval mode, CPU
    record: dict | None  # the run record, when the cell has one

    def dataset(self, split: str | None = None):
        from mma_nmt.data import ParallelDataset

        run = self.cell.run_config
        return ParallelDataset.load(run.prepared_dir(), split or run.eval.split)


def trained_cell(experiment: str | Experiment, system: str, dataset: str, *, scale: str = "mini",
                 seed: int | None = None, runs_dir: str | Path = RUNS_DIR,
                 results_dir: str | Path | None = None) -> TrainedCell:
    """Loads the model of one cell of ``experiment`` (a name or path, or the experiment read already); raises
    FileNotFoundError naming the command that trains it when it is absent."""
    from mma_nmt.experiments.cell import RESULT_FILE, is_finished, read_json
    from mma_nmt.experiments.command import experiment_named
    from mma_nmt.experiments.records import load_records
    from mma_nmt.training.checkpoint import load_model

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
