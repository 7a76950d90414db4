"""Learning-rate schedules (with OpenNMT-py's per-epoch decay), label smoothing, config files, and LSTM runs with SGD
halved on plateau."""

from __future__ import annotations

import json
import math

import pytest
import torch

from mma_nmt.models import LSTMConfig
from mma_nmt.training.config import load_run_config
from mma_nmt.training.loss import label_smoothed_cross_entropy
from mma_nmt.training.optim import LRSchedule, OptimConfig
from mma_nmt.training.trainer import Trainer
from nmt_fixtures import tiny_data, tiny_overrides  # noqa: F401  (fixture)


def _schedule(**fields) -> LRSchedule:
    """No warmup unless asked for (OpenNMT-py's plateau decay has none)."""
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    return LRSchedule(optimizer, OptimConfig(**{"warmup_steps": 0, **fields}), total_steps=100)


def test_inverse_sqrt_warms_up_linearly_then_decays():
    s = _schedule(lr=1e-3, warmup_steps=10, warmup_init_lr=0.0)
    assert s.step(5) == pytest.approx(5e-4)
    assert s.step(10) == pytest.approx(1e-3)
    assert s.step(40) == pytest.approx(5e-4)


def test_cosine_reaches_min_lr_at_the_end():
    s = _schedule(lr=1e-3, warmup_steps=10, warmup_init_lr=0.0, schedule="cosine", min_lr=1e-5)
    assert s.step(10) == pytest.approx(1e-3)
    assert s.step(55) == pytest.approx((1e-3 + 1e-5) / 2)
    assert s.step(100) == pytest.approx(1e-5)


@pytest.mark.parametrize("schedule", ["constant", "plateau"])
def test_constant_and_plateau_warm_up_too(schedule):
    """A warmup asked for is a warmup given (it used to be ignored by these two schedules, silently)."""
    s = _schedule(lr=1e-3, warmup_steps=10, warmup_init_lr=0.0, schedule=schedule)
    assert [s.step(k) for k in (0, 5, 10, 50)] == pytest.approx([0.0, 5e-4, 1e-3, 1e-3])
    assert _schedule(lr=1e-3, warmup_steps=0, schedule=schedule).step(0) == pytest.approx(1e-3)


def test_plateau_decay_applies_during_warmup():
    s = _schedule(optimizer="sgd", lr=0.1, warmup_steps=10, warmup_init_lr=0.0, schedule="plateau")
    s.step(4)
    s.on_validation(50.0)
    s.on_validation(51.0)  # no new best: halve
    assert s.step(5) == pytest.approx(0.025)  # half of the warmup's 0.05
    assert s.step(20) == pytest.approx(0.05)


def test_plateau_halves_when_validation_does_not_improve():
    s = _schedule(optimizer="sgd", lr=0.1, schedule="plateau")
    for ppl, lr in [(50.0, 0.1), (40.0, 0.1), (41.0, 0.05), (39.0, 0.05), (39.5, 0.025)]:
        s.on_validation(ppl)
        assert s.optimizer.param_groups[0]["lr"] == pytest.approx(lr)


def _lrs_over_epochs(schedule: LRSchedule, perplexities: list[float]) -> list[float]:
    """The lr after each epoch's validation (epochs counted from 1)."""
    lrs = []
    for epoch, ppl in enumerate(perplexities, start=1):
        schedule.on_validation(ppl, epoch=epoch)
        lrs.append(schedule.optimizer.param_groups[0]["lr"])
    return lrs


# OpenNMT-py of March 2018 (the multi-head LSTM paper's toolkit), Optim.update_learning_rate after each epoch:
# decay switches on for good once epoch >= start_decay_at (default 8) or once validation perplexity rises, and then the
# lr is multiplied by learning_rate_decay (0.5) after every epoch.
def test_decay_start_epoch_halves_every_epoch_from_that_epoch():
    s = _schedule(optimizer="sgd", lr=0.1, schedule="plateau", decay_start_epoch=8, decay_stays_on=True)
    lrs = _lrs_over_epochs(s, [100.0 - epoch for epoch in range(11)])  # always improving
    assert lrs == pytest.approx([0.1] * 7 + [0.05, 0.025, 0.0125, 0.00625])


def test_decay_stays_on_after_the_first_epoch_without_improvement():
    s = _schedule(optimizer="sgd", lr=0.1, schedule="plateau", decay_start_epoch=8, decay_stays_on=True)
    lrs = _lrs_over_epochs(s, [50.0, 40.0, 41.0, 30.0, 29.0])
    assert lrs == pytest.approx([0.1, 0.1, 0.05, 0.025, 0.0125])
    plain = _schedule(optimizer="sgd", lr=0.1, schedule="plateau")  # the plateau rule alone: only epoch 3 cuts
    assert _lrs_over_epochs(plain, [50.0, 40.0, 41.0, 30.0, 29.0]) == pytest.approx([0.1, 0.1, 0.05, 0.05, 0.05])


def test_decay_start_epoch_without_stays_on_keeps_the_plateau_rule_before_it():
    s = _schedule(optimizer="sgd", lr=0.1, schedule="plateau", decay_start_epoch=4)
    lrs = _lrs_over_epochs(s, [50.0, 51.0, 40.0, 39.0, 38.0])
    assert lrs == pytest.approx([0.1, 0.05, 0.05, 0.025, 0.0125])


def test_decay_state_survives_a_resume():
    config = dict(optimizer="sgd", lr=0.1, schedule="plateau", decay_start_epoch=8, decay_stays_on=True)
    first = _schedule(**config)
    _lrs_over_epochs(first, [50.0, 51.0])  # epoch 2 switched the decay on
    resumed = _schedule(**config)
    resumed.load_state_dict(first.state_dict())
    resumed.on_validation(40.0, epoch=3)  # improved, but the decay stays on
    assert resumed.optimizer.param_groups[0]["lr"] == pytest.approx(0.025)


def test_decay_options_are_checked():
    with pytest.raises(ValueError, match="plateau"):
        OptimConfig(schedule="inverse_sqrt", decay_start_epoch=8)
    with pytest.raises(ValueError, match="decay_start_epoch"):
        OptimConfig(schedule="plateau", decay_start_epoch=-1)
    with pytest.raises(ValueError, match="needs the epoch"):
        _schedule(schedule="plateau", decay_start_epoch=2).on_validation(10.0)
    with pytest.raises(ValueError, match="validate_every"):
        load_run_config(None, ["train.optim.schedule=plateau", "train.optim.decay_start_epoch=8",
                               "train.validate_every=100"])


def test_label_smoothing_matches_its_formula():
    logits = torch.randn(2, 3, 5)
    target = torch.tensor([[1, 2, 0], [4, 0, 0]])
    loss, nll = label_smoothed_cross_entropy(logits, target, epsilon=0.1, ignore_index=0)
    logp = torch.log_softmax(logits, -1)
    keep = target != 0
    expected_nll = -logp.gather(-1, target.unsqueeze(-1)).squeeze(-1)[keep].sum()
    expected = 0.9 * expected_nll + 0.1 * (-logp.mean(-1))[keep].sum()
    torch.testing.assert_close(nll, expected_nll)
    torch.testing.assert_close(loss, expected)


def test_config_file_and_dotted_overrides(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('[model]\npreset = "transformer_iwslt_small"\nencoder.attention = "mma"\n'
                    '[train]\noptim.lr = 0.001\n')
    run = load_run_config(path, ["model.encoder.head_spec=GLLL", "train.max_steps=7", "decode.beam_size=6",
                                 "model.decoder.gmm_layers=[0, 1]"])
    assert (run.model.d_model, run.model.ffn_dim, run.model.heads, run.model.encoder.layers) == (512, 1024, 4, 6)
    assert run.model.encoder.attention == "mma" and run.model.encoder.head_spec == "GLLL"
    assert run.train.optim.lr == 0.001 and run.train.max_steps == 7 and run.decode.beam_size == 6
    assert run.model.decoder.gmm_layers == [0, 1]
    with pytest.raises(ValueError, match="unknown key"):
        load_run_config(None, ["train.max_stepz=3"])


def test_lstm_trains_with_sgd(tmp_path, tiny_data):  # noqa: F811
    run = load_run_config(None, tiny_overrides(
        tiny_data, tmp_path / "lstm", "train.max_steps=4", "train.optim.optimizer=sgd", "train.optim.schedule=plateau",
        "train.optim.lr=0.5", "train.optim.clip_norm=5.0", model=["model.preset=lstm_tiny"]))
    assert isinstance(run.model, LSTMConfig)
    result = Trainer(run).train()
    assert math.isfinite(result["valid_loss"])
    events = [json.loads(line) for line in (tmp_path / "lstm" / "log.jsonl").open()]
    assert events[-1]["step"] == 4 and events[0]["model"]["arch"] == "lstm"


def test_trainer_passes_the_epoch_to_the_decay(tmp_path, tiny_data):  # noqa: F811
    """Three epochs, one validation each, decay from epoch 2 on: the lr logged after the validations halves at epochs
    2 and 3 (epoch 1 improves on nothing before it, so it keeps the initial lr)."""
    run = load_run_config(None, tiny_overrides(
        tiny_data, tmp_path / "lstm", "train.max_epochs=3", "train.validate_every=0", "train.optim.optimizer=sgd",
        "train.optim.schedule=plateau", "train.optim.decay_start_epoch=2", "train.optim.lr=0.5",
        "train.loss_normalization=sentences", model=["model.preset=lstm_tiny"]))
    Trainer(run).train()
    events = [json.loads(line) for line in (tmp_path / "lstm" / "log.jsonl").open()]
    valid = [(e["epoch"], e["lr"]) for e in events if e["event"] == "valid"]
    assert valid == [(1, pytest.approx(0.5)), (2, pytest.approx(0.25)), (3, pytest.approx(0.125))]
