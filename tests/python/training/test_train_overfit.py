"""A tiny MMA Transformer memorises 50 real Multi30k pairs and translates them back."""

from __future__ import annotations

import json

import pytest

from mma_nmt.data import ParallelDataset
from mma_nmt.decoding.search import SearchConfig
from mma_nmt.decoding.translate import translate_dataset
from mma_nmt.training.config import load_run_config
from mma_nmt.training.trainer import Trainer, TrainingDiverged
from nmt_fixtures import tiny_data, tiny_overrides  # noqa: F401  (fixture)


def test_tiny_model_overfits_fifty_pairs_and_translates_them_back(tmp_path, tiny_data):  # noqa: F811
    run = load_run_config(None, tiny_overrides(
        tiny_data, tmp_path / "run", "train.max_steps=220", "model.d_model=64", "model.ffn_dim=128",
        "model.encoder.layers=2", "model.decoder.layers=2", "model.dropout=0.0", "train.label_smoothing=0.0",
        "train.max_tokens=2000", "train.optim.lr=0.005", "train.optim.warmup_steps=20", "train.log_every=20",
        "train.keep_periodic=0"))
    trainer = Trainer(run)
    trainer.train()
    losses = [r["loss"] for r in map(json.loads, (tmp_path / "run" / "log.jsonl").open()) if r["event"] == "train"]
    assert losses[0] > 3.0 and losses[-1] < 0.1, losses
    train = ParallelDataset.load(tiny_data, "train")
    assert len(train) == 50
    hyps = translate_dataset(trainer.model, train, SearchConfig(beam_size=1, batch_size=50))
    exact = sum(h == r for h, r in zip(hyps, train.tgt_text))
    assert exact >= 45, list(zip(hyps, train.tgt_text))[:5]


def test_nan_loss_steps_are_skipped_logged_and_stop_training(tmp_path, tiny_data, monkeypatch):  # noqa: F811
    import mma_nmt.training.trainer as trainer_module

    run = load_run_config(None, tiny_overrides(tiny_data, tmp_path / "run", "train.max_steps=20",
                                               "train.max_bad_steps=2"))
    trainer = Trainer(run)
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    original = trainer_module.label_smoothed_cross_entropy

    def nan_loss(*args, **kwargs):
        loss, nll = original(*args, **kwargs)
        return loss * float("nan"), nll

    monkeypatch.setattr(trainer_module, "label_smoothed_cross_entropy", nan_loss)
    with pytest.raises(TrainingDiverged, match="max_bad_steps=2"):
        trainer.train()
    assert trainer.step == 0 and trainer.bad_steps == 3
    assert all((trainer.model.state_dict()[k] == v).all() for k, v in before.items())
    events = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").open()]
    assert [e["reason"] for e in events if e["event"] == "bad_step"] == ["loss is NaN or inf"] * 3
