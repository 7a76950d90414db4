"""Bad training steps: NaN/inf losses and gradients and (optionally) loss spikes are skipped, logged and counted; the
run stops past train.max_bad_steps; no checkpoint ever holds a NaN or inf weight."""

from __future__ import annotations

import json

import pytest
import torch

import mma_nmt.training.trainer as trainer_module
from mma_nmt.training.checkpoint import load_checkpoint
from mma_nmt.training.config import TrainConfig, load_run_config
from mma_nmt.training.loss import label_smoothed_cross_entropy
from mma_nmt.training.trainer import Trainer, TrainingDiverged
from nmt_fixtures import tiny_data, tiny_overrides  # noqa: F401  (fixture)


class NanGradient(torch.autograd.Function):
    """Identity forward (the loss stays finite), NaN backward."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return torch.full_like(grad, float("nan"))


def inject(monkeypatch, damage: dict):
    """Replaces the trainer's loss so that the training batch number ``n`` (1-based, validation not counted) gets
    ``damage[n]``: "nan_loss", "nan_grad" or a finite factor multiplying the loss."""
    original = label_smoothed_cross_entropy  # the real one, also when called twice in a test
    calls = [0]

    def loss_fn(*args, **kwargs):
        loss, nll = original(*args, **kwargs)
        if not torch.is_grad_enabled():  # validation
            return loss, nll
        calls[0] += 1
        kind = damage.get(calls[0])
        if kind == "nan_loss":
            return loss * float("nan"), nll
        if kind == "nan_grad":
            return NanGradient.apply(loss), nll
        if kind is not None:
            return loss * kind, nll * kind
        return loss, nll

    monkeypatch.setattr(trainer_module, "label_smoothed_cross_entropy", loss_fn)
    return calls


def events(save_dir, kind: str) -> list[dict]:
    return [e for e in map(json.loads, (save_dir / "log.jsonl").open()) if e["event"] == kind]


def checkpoint_files(save_dir) -> list:
    return sorted(p for p in save_dir.glob("*.pt"))


def assert_finite_checkpoints(save_dir) -> None:
    files = checkpoint_files(save_dir)
    assert files
    for path in files:
        payload = load_checkpoint(path)
        for name, tensor in payload["model"].items():
            assert torch.isfinite(tensor).all(), (path.name, name)


def adam_steps(trainer) -> set[int]:
    return {int(state["step"]) for state in trainer.optimizer.state.values()}


def test_nan_losses_and_gradients_are_skipped_and_training_goes_on(tmp_path, tiny_data, monkeypatch):  # noqa: F811
    save_dir = tmp_path / "run"
    run = load_run_config(None, tiny_overrides(tiny_data, save_dir, "train.max_steps=8", "train.save_every=2",
                                               "train.max_bad_steps=3"))
    calls = inject(monkeypatch, {2: "nan_grad", 5: "nan_grad", 7: "nan_loss"})
    trainer = Trainer(run)
    trainer.train()
    assert (trainer.step, trainer.bad_steps, calls[0]) == (8, 3, 11)  # 8 updates from 11 batches
    assert adam_steps(trainer) == {8}  # the skipped batches never reached the optimizer
    bad = [(e["step"], e["reason"], e["bad_steps"]) for e in events(save_dir, "bad_step")]
    assert bad == [(1, "gradient norm is NaN or inf", 1), (3, "gradient norm is NaN or inf", 2),
                   (4, "loss is NaN or inf", 3)]  # step = updates done before the bad batch
    assert_finite_checkpoints(save_dir)
    assert load_checkpoint(save_dir / "last.pt")["bad_steps"] == 3
    # the bad batch after step 4 (a save_every step) saves nothing again; the final save is the validation's
    assert [e["step"] for e in events(save_dir, "checkpoint")] == [2, 4, 6, 8, 8]
    assert [e["step"] for e in events(save_dir, "valid")] == [8]


def test_too_many_bad_steps_stop_the_run_with_clean_checkpoints(tmp_path, tiny_data, monkeypatch):  # noqa: F811
    save_dir = tmp_path / "run"
    run = load_run_config(None, tiny_overrides(tiny_data, save_dir, "train.max_steps=20", "train.save_every=2",
                                               "train.max_bad_steps=2"))
    inject(monkeypatch, {n: "nan_grad" for n in range(6, 100)})
    trainer = Trainer(run)
    with pytest.raises(TrainingDiverged, match=r"3 skipped steps .* more than train.max_bad_steps=2"):
        trainer.train()
    assert (trainer.step, trainer.bad_steps) == (5, 3)
    assert [e["bad_steps"] for e in events(save_dir, "bad_step")] == [1, 2, 3]
    assert load_checkpoint(save_dir / "last.pt")["step"] == 4
    assert_finite_checkpoints(save_dir)


def test_weights_that_are_not_finite_are_never_saved(tmp_path, tiny_data):  # noqa: F811
    save_dir = tmp_path / "run"
    run = load_run_config(None, tiny_overrides(tiny_data, save_dir, "train.max_steps=10", "train.save_every=2"))
    trainer = Trainer(run)
    original_step = trainer.optimizer.step

    def step_then_corrupt(*args, **kwargs):  # as a faulty optimizer or kernel would
        result = original_step(*args, **kwargs)
        if trainer.step == 3:  # the update that makes step 4, which is saved
            next(trainer.model.parameters()).data.view(-1)[0] = float("inf")
        return result

    trainer.optimizer.step = step_then_corrupt
    with pytest.raises(TrainingDiverged, match=r"step 4: parameters \[.*\] hold NaN or inf; no checkpoint written"):
        trainer.train()
    assert [p.name for p in checkpoint_files(save_dir)] == ["last.pt", "step_2.pt"]
    assert load_checkpoint(save_dir / "last.pt")["step"] == 2
    assert_finite_checkpoints(save_dir)


def test_loss_spike_rule_skips_a_huge_finite_loss(tmp_path, tiny_data, monkeypatch):  # noqa: F811
    def train(name, *extra):
        save_dir = tmp_path / name
        run = load_run_config(None, tiny_overrides(tiny_data, save_dir, "train.max_steps=8", *extra))
        inject(monkeypatch, {7: 50.0})  # batch 7: loss x 50, finite
        trainer = Trainer(run)
        trainer.train()
        return trainer, save_dir

    off, off_dir = train("off")  # the default: no rule, the x50 batch is an ordinary update
    assert (off.step, off.bad_steps, events(off_dir, "bad_step")) == (8, 0, [])

    on, on_dir = train("on", "train.loss_spike_factor=3", "train.loss_spike_window=4")
    assert (on.step, on.bad_steps, adam_steps(on)) == (8, 1, {8})
    [bad] = events(on_dir, "bad_step")
    assert bad["step"] == 6 and bad["reason"].startswith("loss spike: ")
    assert "> train.loss_spike_factor=3 x" in bad["reason"] and "(mean of the last 4 steps)" in bad["reason"]
    spike = float(bad["reason"].split()[2])
    mean = float(bad["reason"].split(" x ")[1].split()[0])
    assert spike > 3 * mean > 3.0  # the label-smoothed loss of a fresh tiny model is ~6
    assert len(on.recent_losses) == 4

    resumed = Trainer(load_run_config(None, tiny_overrides(tiny_data, on_dir, "train.max_steps=8",
                                                           "train.loss_spike_factor=3",
                                                           "train.loss_spike_window=4")))
    assert list(resumed.recent_losses) == list(on.recent_losses)  # part of the checkpoint: resumption stays exact


@pytest.mark.parametrize("fields, message", [
    (dict(loss_spike_factor=0.5), r"loss_spike_factor must be 0 \(off\) or above 1, got 0.5"),
    (dict(loss_spike_factor=float("nan")), "loss_spike_factor must be 0"),
    (dict(loss_spike_factor=-2.0), "loss_spike_factor must be 0"),
    (dict(loss_spike_window=0), "loss_spike_window must be at least 1, got 0"),
])
def test_bad_loss_spike_settings_are_rejected(fields, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(**fields)
