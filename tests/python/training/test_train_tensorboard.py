"""``train.loggers = ["tensorboard"]``: the training loss and learning rate of each ``train`` log entry and every
validation's loss and BLEU, read back from the event files by update; a resumed run's curves have each update once;
without the tensorboard package the run is refused naming the extra."""

from __future__ import annotations

import json
import sys

import pytest

from mma_nmt.training.config import load_run_config
from mma_nmt.training.trainer import Trainer, TrainingInterrupted
from nmt_fixtures import tiny_data, tiny_overrides  # noqa: F401  (fixture)

LOGGER = 'train.loggers=["tensorboard"]'


def _scalars(log_dir) -> dict[str, list[tuple[int, float]]]:
    event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    accumulator = event_accumulator.EventAccumulator(str(log_dir))
    accumulator.Reload()
    return {tag: [(event.step, event.value) for event in accumulator.Scalars(tag)]
            for tag in accumulator.Tags()["scalars"]}


def _events(save_dir, kind: str) -> list[dict]:
    return [e for e in map(json.loads, (save_dir / "log.jsonl").open()) if e["event"] == kind]


def test_tensorboard_holds_the_logged_losses_lr_and_bleu_by_update(tmp_path, tiny_data):  # noqa: F811
    pytest.importorskip("tensorboard")
    save_dir = tmp_path / "run"
    Trainer(load_run_config(None, tiny_overrides(tiny_data, save_dir, "train.max_steps=7", "train.validate_every=3",
                                                 "train.log_every=2", "train.bleu_sentences=4", LOGGER))).train()
    scalars = _scalars(save_dir / "tensorboard")
    train, valid = _events(save_dir, "train"), _events(save_dir, "valid")
    assert [e["step"] for e in train] == [2, 4, 6] and [e["step"] for e in valid] == [3, 6, 7]  # 7: the last one
    for tag, key, events in (("train/loss", "loss", train), ("train/lr", "lr", train),
                             ("train/nll", "nll", train), ("valid/loss", "valid_loss", valid),
                             ("valid/nll", "valid_nll", valid), ("valid/bleu", "valid_bleu", valid)):
        assert [step for step, _ in scalars[tag]] == [e["step"] for e in events], tag
        assert [value for _, value in scalars[tag]] == pytest.approx([e[key] for e in events], rel=1e-6), tag
    assert scalars["train/lr"][0][1] < scalars["train/lr"][1][1]  # warm-up: the curve is the schedule's


def test_a_resumed_run_writes_each_update_once(tmp_path, tiny_data):  # noqa: F811
    pytest.importorskip("tensorboard")
    save_dir = tmp_path / "run"
    overrides = tiny_overrides(tiny_data, save_dir, "train.max_steps=6", "train.save_every=3", "train.log_every=1",
                               LOGGER)

    def ctrl_c_at_5(trainer):
        if trainer.step == 5:
            raise KeyboardInterrupt

    with pytest.raises(TrainingInterrupted):
        Trainer(load_run_config(None, overrides), hooks=(ctrl_c_at_5,)).train()
    assert [e["step"] for e in _events(save_dir, "train")] == [1, 2, 3, 4, 5]
    Trainer(load_run_config(None, overrides)).train()  # resumes at step 3: updates 4 and 5 again
    train = _events(save_dir, "train")
    assert [e["step"] for e in train] == [1, 2, 3, 4, 5, 4, 5, 6]
    losses = _scalars(save_dir / "tensorboard")["train/loss"]
    assert [step for step, _ in losses] == [1, 2, 3, 4, 5, 6]  # the interrupted run's 4 and 5 are hidden
    assert [value for _, value in losses] == pytest.approx([e["loss"] for e in train[:3] + train[5:]], rel=1e-6)


def test_without_tensorboard_the_run_is_refused_naming_the_extra(tmp_path, tiny_data, monkeypatch):  # noqa: F811
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # import tensorboard raises ImportError
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)
    run = load_run_config(None, tiny_overrides(tiny_data, tmp_path / "run", "train.max_steps=2", LOGGER))
    with pytest.raises(ImportError, match=r'needs the tensorboard package.*pip install "mma_nmt\[tensorboard\]"'):
        Trainer(run)
    assert not (tmp_path / "run").exists()
