"""A run config written as a dict (``run_config.json``, records, exports) reads back as the same config, for every
model preset: an LSTM config, which carries no ``preset`` key once stored, must not be read on top of the default
Transformer preset (it was, and failed with "unknown key(s) ['activation_dropout', ...] in model")."""

from __future__ import annotations

import json

import pytest

from mma_nmt.config_io import to_dict
from mma_nmt.models.presets import PRESETS
from mma_nmt.training.config import model_config_from_dict, run_config_from_dict


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_a_stored_run_config_reads_back_as_itself(name):
    run = run_config_from_dict({"model": {"preset": name, "dropout": 0.25}, "train": {"max_steps": 7}})
    stored = json.loads(json.dumps(to_dict(run)))  # what run_config.json holds
    assert "preset" not in stored["model"]
    assert run_config_from_dict(stored) == run


def test_without_a_preset_a_transformer_still_starts_from_the_default_preset():
    partial = model_config_from_dict({"heads": 2})
    assert partial == model_config_from_dict({"preset": "transformer_tiny", "heads": 2})
    assert model_config_from_dict({"arch": "lstm", "heads": 2}).heads == 2
