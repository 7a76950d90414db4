"""Paper reproductions: experiment files (``experiments/<paper>/experiment.toml``) run as tables of systems.

The way from a recipe to a table: :mod:`~mma_nmt.experiments.spec` reads the recipe and plans each run once
(:class:`~mma_nmt.experiments.spec.PlannedRun`); :mod:`~mma_nmt.experiments.runner` trains, translates and scores the
runs without a record; :mod:`~mma_nmt.experiments.records` keeps what each finished run leaves;
:mod:`~mma_nmt.experiments.report` builds and writes each table from the records; :mod:`~mma_nmt.experiments.command`
is the ``mma-nmt experiment`` command that strings them together (:mod:`~mma_nmt.experiments.status` for
``--status``)."""

from mma_nmt.experiments.spec import SCALES, Experiment, ExperimentError, Plan, PlannedRun, load_experiment

__all__ = ["SCALES", "Experiment", "ExperimentError", "Plan", "PlannedRun", "load_experiment"]
