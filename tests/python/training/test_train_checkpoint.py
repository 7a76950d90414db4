"""Checkpoints: atomic writes, weights_only loading, clear errors, retention, averaging."""

from __future__ import annotations

import pytest
import torch

from mma_nmt.training.checkpoint import (FORMAT_VERSION, CheckpointError, CheckpointManager, average_checkpoints,
                                         load_checkpoint, load_model, save_checkpoint)


def _payload(value: float, config=None) -> dict:
    return {"model_config": config or {"arch": "transformer", "d_model": 8}, "model": {"w": torch.full((2, 3), value)},
            "step": int(value)}


def test_checkpoint_loads_with_weights_only_and_carries_version_and_config(tmp_path):
    path = save_checkpoint(_payload(1.0), tmp_path / "a.pt")
    raw = torch.load(path, weights_only=True)
    assert raw["format_version"] == FORMAT_VERSION and raw["model_config"]["d_model"] == 8
    assert [p.name for p in tmp_path.iterdir()] == ["a.pt"]  # no temporary file left behind


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty"])
def test_corrupt_checkpoint_gives_a_clear_error(tmp_path, damage):
    path = save_checkpoint(_payload(1.0), tmp_path / "a.pt")
    data = path.read_bytes()
    path.write_bytes({"truncate": data[: len(data) // 2], "garbage": b"not a checkpoint" * 10, "empty": b""}[damage])
    with pytest.raises(CheckpointError, match="corrupt or truncated"):
        load_checkpoint(path)


def test_wrong_version_and_missing_file_and_other_model_are_clear_errors(tmp_path):
    path = tmp_path / "old.pt"
    torch.save({"format_version": FORMAT_VERSION + 1, "model": {}}, path)
    with pytest.raises(CheckpointError, match="format version"):
        load_checkpoint(path)
    with pytest.raises(CheckpointError, match="does not exist"):
        load_checkpoint(tmp_path / "missing.pt")
    save_checkpoint(_payload(1.0), tmp_path / "a.pt")
    with pytest.raises(CheckpointError, match="different model config: d_model: checkpoint 8 vs config 16"):
        load_checkpoint(tmp_path / "a.pt", model_config={"arch": "transformer", "d_model": 16})


def test_manager_keeps_last_best_and_recent_periodic(tmp_path):
    manager = CheckpointManager(tmp_path, keep_periodic=2)
    for step in (10, 20, 30):
        manager.save(_payload(float(step)), step, is_best=step == 20)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["best.pt", "last.pt", "step_20.pt", "step_30.pt"]
    assert load_checkpoint(tmp_path / "best.pt")["step"] == 20
    assert load_checkpoint(tmp_path / "last.pt")["step"] == 30


def test_manager_writes_last_pt_last_and_removes_only_its_stale_temporaries(tmp_path, monkeypatch):
    import mma_nmt.training.checkpoint as checkpoint

    written = []
    original = checkpoint.save_checkpoint

    def recording_save(payload, path):
        written.append(path.name)
        return original(payload, path)

    monkeypatch.setattr(checkpoint, "save_checkpoint", recording_save)
    stale = [tmp_path / name for name in (".last.pt.k2j_x.tmp", ".best.pt.abc.tmp", ".step_10.pt.q1.tmp")]
    foreign = [tmp_path / name for name in (".other.pt.abc.tmp", "notes.tmp", ".step_10.pt")]
    for path in stale + foreign:
        path.write_bytes(b"half")
    manager = CheckpointManager(tmp_path, keep_periodic=1)
    assert manager.stale_temporaries() == sorted(stale)
    manager.save(_payload(10.0), 10)
    manager.save(_payload(20.0), 20, is_best=True)
    assert written == ["step_10.pt", "last.pt", "best.pt", "step_20.pt", "last.pt"]  # last.pt is the commit point
    assert manager.stale_temporaries() == [] and all(path.exists() for path in foreign)
    assert sorted(p.name for p in tmp_path.glob("[!.]*.pt")) == ["best.pt", "last.pt", "step_20.pt"]


def test_averaging_gives_the_mean_weights(tmp_path):
    paths = [save_checkpoint(_payload(v), tmp_path / f"{v}.pt") for v in (1.0, 2.0, 6.0)]
    averaged = average_checkpoints(paths)
    torch.testing.assert_close(averaged["model"]["w"], torch.full((2, 3), 3.0))
    other = save_checkpoint(_payload(1.0, {"arch": "lstm"}), tmp_path / "other.pt")
    with pytest.raises(CheckpointError, match="different model config"):
        average_checkpoints([paths[0], other])


def test_model_round_trips_through_a_checkpoint(tmp_path):
    from mma_nmt.config_io import to_dict
    from mma_nmt.models import build_model
    from nmt_fixtures import random_batch, tiny_transformer

    config = tiny_transformer()
    config.encoder.attention = "mma"
    torch.manual_seed(0)
    model = build_model(config).eval()
    save_checkpoint({"model_config": to_dict(config), "model": model.state_dict()}, tmp_path / "m.pt")
    loaded, loaded_config = load_model(tmp_path / "m.pt")
    assert loaded_config == config
    src, lengths, prev, _ = random_batch()
    torch.testing.assert_close(loaded(src, lengths, prev), model(src, lengths, prev))


def test_checkpoint_with_gmm_variant_names_of_an_earlier_version_still_loads_and_resumes(tmp_path):
    """Every Transformer checkpoint written before the GMM normalisation variants took the names of their
    normalisations holds ``decoder.gmm_variant = "approx"`` (the default then), a synthesis-network one "synthesis":
    it builds today's model and matches today's config of the same model (a run resumes); another variant still
    does not."""
    from mma_nmt.config_io import to_dict
    from mma_nmt.models import build_model
    from nmt_fixtures import random_batch, tiny_transformer

    config = tiny_transformer()
    config.decoder.cross_attention, config.decoder.gmm_variant = "gmm", "unnormalised"
    torch.manual_seed(0)
    model = build_model(config).eval()
    stored = to_dict(config)
    stored["decoder"]["gmm_variant"] = "synthesis"
    path = save_checkpoint({"model_config": stored, "model": model.state_dict()}, tmp_path / "m.pt")
    loaded, loaded_config = load_model(path)
    assert loaded_config == config
    src, lengths, prev, _ = random_batch()
    torch.testing.assert_close(loaded(src, lengths, prev), model(src, lengths, prev))
    load_checkpoint(path, model_config=to_dict(config))
    config.decoder.gmm_variant = "approximate"
    with pytest.raises(CheckpointError, match="gmm_variant: checkpoint 'unnormalised' vs config 'approximate'"):
        load_checkpoint(path, model_config=to_dict(config))
    stored["decoder"].update(cross_attention="standard", gmm_variant="approx")  # a model without GMM, default variant
    config.decoder.cross_attention = "standard"
    load_checkpoint(save_checkpoint({"model_config": stored, "model": {}}, tmp_path / "s.pt"),
                    model_config=to_dict(config))
