"""``train.deterministic``: torch's deterministic algorithms while a run trains, and the settings before it after.
On a GPU (the CUDA suite) two runs of one config give the same weights bit for bit."""

from __future__ import annotations

import os

import pytest
import torch

from mma_nmt.training.config import load_run_config
from mma_nmt.training.determinism import CUBLAS_WORKSPACE, deterministic_algorithms
from mma_nmt.training.trainer import Trainer

from nmt_fixtures import tiny_data, tiny_overrides  # noqa: F401  (fixture)


def test_the_block_sets_and_restores_torchs_settings(monkeypatch):
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    torch.use_deterministic_algorithms(True, warn_only=True)  # a caller's own setting comes back as it was
    try:
        with deterministic_algorithms(True):
            assert torch.are_deterministic_algorithms_enabled()
            assert not torch.is_deterministic_algorithms_warn_only_enabled()
            assert not torch.backends.cudnn.benchmark
            assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == CUBLAS_WORKSPACE
        assert torch.are_deterministic_algorithms_enabled() and torch.is_deterministic_algorithms_warn_only_enabled()
    finally:
        torch.use_deterministic_algorithms(False)
    with deterministic_algorithms(False):
        assert not torch.are_deterministic_algorithms_enabled()


def test_a_users_cublas_workspace_setting_is_kept(monkeypatch):
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8")
    with deterministic_algorithms(True):
        assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":16:8"
    assert not torch.are_deterministic_algorithms_enabled()


def test_the_settings_come_back_after_an_error():
    with pytest.raises(RuntimeError, match="inside"):
        with deterministic_algorithms(True):
            raise RuntimeError("inside")
    assert not torch.are_deterministic_algorithms_enabled()


def _train(data, save_dir, device="cpu"):
    seen = []  # the flag after each update, as a hook sees it

    def record(trainer):
        seen.append(torch.are_deterministic_algorithms_enabled())

    overrides = tiny_overrides(data, save_dir, "train.max_steps=3", "train.deterministic=true",
                               f"train.device={device}")
    Trainer(load_run_config(None, overrides), hooks=(record,)).train()
    return seen, torch.load(save_dir / "last.pt", map_location="cpu", weights_only=True)["model"]


def test_training_steps_run_under_deterministic_algorithms_and_leave_them_off(tmp_path, tiny_data):  # noqa: F811
    """Every step of the tiny MMA Transformer (the fused attention forward and backward, the loss, Adam) runs with the
    flag on, none of them refusing it, and the flag is off again after the run."""
    seen, _ = _train(tiny_data, tmp_path / "run")
    assert seen == [True, True, True]
    assert not torch.are_deterministic_algorithms_enabled()


@pytest.mark.cuda
def test_two_gpu_runs_of_one_config_give_the_same_weights(tmp_path, tiny_data):  # noqa: F811
    """The whole training path on a GPU under deterministic algorithms: attention's tiled backward (not the warp
    kernel's atomics), cuBLAS with a fixed workspace, and no torch operator refusing the mode."""
    _, first = _train(tiny_data, tmp_path / "first", device="cuda")
    _, second = _train(tiny_data, tmp_path / "second", device="cuda")
    assert first.keys() == second.keys()
    for name in first:
        assert torch.equal(first[name], second[name]), name
