"""Weights that do not fit the model of a checkpoint's config (issue 50, case 16): one line naming the checkpoint and
the tensor, instead of torch's "Error(s) in loading state_dict" with one more line per tensor."""

from __future__ import annotations

import pytest
import torch

from mma_nmt.config_io import to_dict
from mma_nmt.models import build_model
from mma_nmt.training.checkpoint import CheckpointError, load_model, save_checkpoint
from nmt_fixtures import tiny_transformer


def test_weights_of_another_shape_are_refused_in_one_line_naming_the_checkpoint(tmp_path):
    config = tiny_transformer()
    weights = build_model(config).state_dict()
    name = next(key for key, value in weights.items() if value.dim() == 2)
    weights[name] = torch.zeros(weights[name].shape[0] + 1, weights[name].shape[1])
    path = save_checkpoint({"model_config": to_dict(config), "model": weights, "step": 1}, tmp_path / "edited.pt")
    with pytest.raises(CheckpointError) as refused:
        load_model(path)
    message = str(refused.value)
    assert "\n" not in message and str(path) in message and f"size mismatch for {name}" in message, message
