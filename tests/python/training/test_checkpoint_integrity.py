"""What loading and averaging refuse (issue 50, cases 6, 8 and 18): a NaN or inf weight (named, with its count),
checkpoints of different SentencePiece models or model configs averaged together, and a pickle asking for a Python
global that no checkpoint of ours holds (called untrusted, without torch's advice to allow-list it)."""

from __future__ import annotations

import os

import pytest
import torch

from mma_nmt.config_io import to_dict
from mma_nmt.models import build_model
from mma_nmt.training.checkpoint import (CheckpointError, average_checkpoints, load_checkpoint, load_model,
                                         save_checkpoint)
from nmt_fixtures import tiny_transformer

FINGERPRINTS = {"src": "a" * 64, "tgt": "b" * 64}


def _save(path, *, seed: int = 0, tokenizers=FINGERPRINTS, **config) -> tuple:
    """A checkpoint of a freshly initialised tiny Transformer: (path, its state dict)."""
    torch.manual_seed(seed)
    model_config = tiny_transformer(**config)
    weights = build_model(model_config).state_dict()
    payload = {"model_config": to_dict(model_config), "model": weights, "step": seed}
    if tokenizers is not None:
        payload["tokenizers"] = dict(tokenizers)
    return save_checkpoint(payload, path), weights


def _poison(path, key: str, count: int, value=float("nan")) -> None:
    payload = torch.load(path, weights_only=True)
    payload["model"][key].view(-1)[:count] = value
    torch.save(payload, path)


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_load_model_refuses_a_non_finite_weight_naming_it(tmp_path, value):
    path, weights = _save(tmp_path / "a.pt")
    key = [k for k, v in weights.items() if v.is_floating_point() and v.numel() > 3][2]
    _poison(path, key, 3, value)
    with pytest.raises(CheckpointError, match=rf"checkpoint {path} holds non-finite weights: {key} has 3 NaN or inf "
                                              rf"value\(s\) of {weights[key].numel()}"):
        load_model(path)


def test_average_refuses_a_non_finite_weight_naming_the_checkpoint_and_the_tensor(tmp_path):
    good, weights = _save(tmp_path / "good.pt", seed=1)
    bad, _ = _save(tmp_path / "bad.pt", seed=2)
    key = [k for k, v in weights.items() if v.is_floating_point()][-1]
    _poison(bad, key, 1)
    for paths in ([good, bad], [bad, good]):
        with pytest.raises(CheckpointError, match=rf"checkpoint {bad} holds non-finite weights: {key} has 1 NaN"):
            average_checkpoints(paths)


def test_average_refuses_checkpoints_of_different_sentencepiece_models(tmp_path):
    first, _ = _save(tmp_path / "first.pt", seed=1)
    other, _ = _save(tmp_path / "other.pt", seed=2, tokenizers={"src": "a" * 64, "tgt": "c" * 64})
    with pytest.raises(CheckpointError) as raised:
        average_checkpoints([first, other])
    message = str(raised.value)
    assert f"cannot average {first} and {other}" in message and "different SentencePiece models" in message
    assert f"tgt {'b' * 64} vs {'c' * 64}" in message and "src" not in message.split("(")[1]
    unrecorded, _ = _save(tmp_path / "old.pt", seed=3, tokenizers=None)
    with pytest.raises(CheckpointError, match=f"{unrecorded} records no tokenizer fingerprints"):
        average_checkpoints([first, unrecorded])
    same, _ = _save(tmp_path / "same.pt", seed=4)
    assert average_checkpoints([first, same])["tokenizers"] == FINGERPRINTS


def test_average_refuses_checkpoints_of_different_model_configs(tmp_path):
    first, _ = _save(tmp_path / "first.pt")
    other, _ = _save(tmp_path / "other.pt", d_model=16, ffn_dim=64)
    with pytest.raises(CheckpointError, match=rf"checkpoint {other} was written for a different model config: "
                                              rf"d_model: checkpoint 16 vs config 32"):
        average_checkpoints([first, other])


class _NotAllowListed:
    """A class that ``torch.load(weights_only=True)`` does not know: a checkpoint holding it was not written by us."""


class _RunsACommand:
    def __reduce__(self):
        return os.system, ("echo this would run",)


@pytest.mark.parametrize("planted, name", [(_NotAllowListed, "_NotAllowListed"), (_RunsACommand, "system")])
def test_a_pickled_foreign_global_is_called_untrusted_without_advice_to_allow_it(tmp_path, capsys, planted, name):
    from mma_nmt.cli.main import main

    path = tmp_path / "malicious.pt"
    torch.save({"format_version": 1, "model": {}, "payload": planted()}, path)
    with pytest.raises(CheckpointError) as raised:
        load_checkpoint(path)
    message = str(raised.value)
    assert message.startswith(f"{path} is not a trusted mma_nmt checkpoint: it asks the unpickler for the Python "
                              f"global ") and name in message, message
    for advice in ("add_safe_globals", "safe_globals", "weights_only", "allowlist", "if you trust"):
        assert advice not in message
    assert "\n" not in message and raised.value.__cause__ is None  # torch's advice is not chained either
    status = main(["average", str(path), "--output", str(tmp_path / "avg.pt")])
    err = capsys.readouterr().err
    assert status == 2 and err.startswith(f"mma-nmt: error: {path} is not a trusted mma_nmt checkpoint")
    assert "safe" not in err and err.count("\n") == 1
    assert not (tmp_path / "avg.pt").exists()
