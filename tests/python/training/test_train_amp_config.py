"""``train.amp`` takes "bf16", "fp16" or false; ``true`` still loads, as a deprecated spelling of "fp16" with one
warning, and the identity of a run whose config says ``amp = true`` stays what it was (records are found by it).
``train.loggers`` does not enter a run's identity either: it changes no result."""

from __future__ import annotations

import json
import textwrap
import warnings
from pathlib import Path

import pytest

from mma_nmt.experiments.spec import load_experiment, run_identity
from mma_nmt.training.config import TrainConfig, load_run_config, run_config_from_dict

REPO = Path(__file__).resolve().parents[3]
EXPERIMENT = """
name = "toy"
[datasets.de_en]
mini = { base = "base.toml", label = "Multi30k De-En (for X)" }
[systems.baseline]
label = "Base"
[tables.t]
title = "T"
columns = ["de_en"]
rows = ["baseline"]
baseline = "baseline"
"""
BASE = """
[data]
corpus = "multi30k_de_en"
out_dir = "runs/data/x"
[model]
preset = "transformer_tiny"
[train]
max_steps = 2
"""


@pytest.mark.parametrize("value, expected", [("bf16", "bf16"), ("fp16", "fp16"), ("false", False)])
def test_amp_choices(value, expected):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no deprecation warning for the current spellings
        assert load_run_config(None, [f"train.amp={value}"]).train.amp == expected


def test_amp_true_is_fp16_with_one_deprecation_warning(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text("[train]\namp = true\n")
    with pytest.warns(FutureWarning, match=r'train.amp = true is deprecated: it means "fp16"') as caught:
        config = load_run_config(path)
    assert config.train.amp == "fp16" and len(caught) == 1
    assert len(str(caught[0].message).splitlines()) == 1


@pytest.mark.parametrize("value", ["bf17", "float16", 1])
def test_other_amp_values_are_refused_naming_the_choices(value):
    with pytest.raises(ValueError, match=r"train.amp must be one of \['bf16', 'fp16', False\]"):
        run_config_from_dict({"train": {"amp": value}})
    with pytest.raises(ValueError, match=r"train.amp must be one of"):
        TrainConfig(amp=value)


def _toy_cell(tmp_path: Path, train_extra: str):
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "base.toml").write_text(BASE + train_extra)
    (tmp_path / "experiment.toml").write_text(textwrap.dedent(EXPERIMENT))
    return load_experiment(tmp_path / "experiment.toml").cell("baseline", "de_en", "mini")


def test_a_config_with_amp_true_keeps_its_identity_and_runs_as_fp16(tmp_path):
    with pytest.warns(FutureWarning):
        cell = _toy_cell(tmp_path, "amp = true\n")
        run = cell.run_config
    # computed by the code before train.amp took "bf16"/"fp16" (the identity hashes the config as written)
    assert cell.identity == "13c161f77c"
    assert cell.config["train"]["amp"] is True and run.train.amp == "fp16"


def test_loggers_leave_the_identity_alone(tmp_path):
    plain = _toy_cell(tmp_path / "plain", "")
    logged = _toy_cell(tmp_path / "logged", 'loggers = ["tensorboard"]\n')
    assert logged.config["train"]["loggers"] == ["tensorboard"]
    assert logged.identity == plain.identity


def test_every_committed_record_loads_and_keeps_its_identity():
    paths = sorted(REPO.glob("experiments/**/record.json"))
    assert paths
    for path in paths:
        record = json.loads(path.read_text(encoding="utf-8"))
        assert run_identity(record["config"], record["average_last"]) == record["identity"], path
        run_config_from_dict(record["config"])  # its config still loads


def test_unknown_logger_is_refused():
    with pytest.raises(ValueError, match=r"train.loggers must be 'tensorboard', got 'wandb'"):
        load_run_config(None, ['train.loggers=["wandb"]'])
    with pytest.raises(ValueError, match=r"train.loggers: unknown logger 'wandb'; known: \['tensorboard'\]"):
        TrainConfig(loggers=["wandb"])
