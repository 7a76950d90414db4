"""``train.patience`` and ``train.best_metric``: when training stops, which checkpoint is best, and that both survive a
resume."""

from __future__ import annotations

import json
import math

import pytest
import torch

from mma_nmt.training.config import load_run_config
from mma_nmt.training.early_stopping import EarlyStopping
from mma_nmt.training.trainer import Trainer

from nmt_fixtures import tiny_data, tiny_overrides  # noqa: F401  (fixture)


def test_patience_counts_validations_without_a_new_best():
    stopper = EarlyStopping(best_metric="nll", patience=2)
    assert stopper.update({"valid_nll": 3.0}, 10) and not stopper.should_stop
    assert stopper.update({"valid_nll": 2.5}, 20)
    assert not stopper.update({"valid_nll": 2.5}, 30)  # equal is not better
    assert not stopper.should_stop
    assert not stopper.update({"valid_nll": 2.7}, 40)
    assert stopper.should_stop and stopper.best_step == 20 and stopper.best == 2.5


def test_bleu_is_higher_is_better_and_nan_is_never_best():
    stopper = EarlyStopping(best_metric="bleu", patience=1)
    assert stopper.update({"valid_bleu": 10.0, "valid_nll": 9.0}, 1)
    assert stopper.update({"valid_bleu": 12.0, "valid_nll": 9.5}, 2)
    assert not stopper.update({"valid_bleu": math.nan, "valid_nll": 1.0}, 3)
    assert stopper.should_stop and stopper.best_step == 2


def test_patience_zero_never_stops_and_bad_settings_are_refused():
    stopper = EarlyStopping(patience=0)
    for step in range(5):
        stopper.update({"valid_nll": 1.0}, step)
    assert not stopper.should_stop
    with pytest.raises(ValueError, match="train.best_metric"):
        EarlyStopping(best_metric="loss")
    with pytest.raises(ValueError, match="train.patience"):
        load_run_config(None, ["train.patience=-1"])
    with pytest.raises(ValueError, match="bleu_sentences"):
        load_run_config(None, ["train.best_metric=bleu", "train.bleu_sentences=0"])
    with pytest.raises(ValueError, match="valid_bleu"):
        EarlyStopping(best_metric="bleu").update({"valid_nll": 1.0}, 1)


def test_checkpoints_from_before_early_stopping_load():
    stopper = EarlyStopping()
    stopper.load_state_dict({"best": 1.75})
    assert (stopper.best, stopper.best_step, stopper.stale) == (1.75, -1, 0)


def _frozen_run(data, save_dir, *extra):
    """lr 0: the validation loss never changes, so only the first validation is a new best."""
    return load_run_config(None, tiny_overrides(data, save_dir, "train.validate_every=2", "train.patience=3",
                                                "train.optim.schedule=constant", "train.optim.lr=0.0",
                                                "train.optim.warmup_steps=0", *extra))


def _events(save_dir, kind):
    return [e for e in map(json.loads, (save_dir / "log.jsonl").open()) if e["event"] == kind]


def test_training_stops_after_patience_validations_and_says_why(tmp_path, tiny_data):  # noqa: F811
    save = tmp_path / "run"
    Trainer(_frozen_run(tiny_data, save, "train.max_steps=100")).train()
    valid = _events(save, "valid")
    assert [e["step"] for e in valid] == [2, 4, 6, 8]  # best at 2, then three without improvement
    assert [e["best"] for e in valid] == [True, False, False, False]
    end = _events(save, "end")[-1]
    assert (end["step"], end["stopped"], end["best_step"]) == (8, "patience", 2)
    assert torch.load(save / "best.pt", weights_only=True)["step"] == 2


def test_patience_count_survives_a_resume(tmp_path, tiny_data):  # noqa: F811
    save = tmp_path / "run"
    Trainer(_frozen_run(tiny_data, save, "train.max_steps=4")).train()  # validations at 2 (best) and 4 (stale 1)
    assert _events(save, "end")[-1]["stopped"] == "max_steps"
    Trainer(_frozen_run(tiny_data, save, "train.max_steps=100")).train()
    end = _events(save, "end")[-1]
    assert (end["step"], end["stopped"], end["best_step"]) == (8, "patience", 2)  # not 10: the count was kept
