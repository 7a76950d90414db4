"""Paper reproductions: experiment files (``experiments/<paper>/experiment.toml``) run as tables of systems."""

from mma_nmt.experiments.spec import SCALES, Experiment, ExperimentError, load_experiment

__all__ = ["SCALES", "Experiment", "ExperimentError", "load_experiment"]
