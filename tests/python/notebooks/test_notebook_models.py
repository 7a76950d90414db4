"""The notebooks' small models (mma_nmt.demos.notebook_models): presets, run configs, train once then load."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from mma_nmt.demos.notebook_models import NotebookScale, notebook_run, notebook_scale, train_or_load

SCALE = NotebookScale("test", train_lines=50, vocab_size=320, steps=2, max_tokens=400, warmup_steps=1, lr=0.001,
                      test_sentences=1, analysis_sentences=1, gold_pairs=1)
MODEL = {"preset": "transformer_tiny", "d_model": 32, "ffn_dim": 64, "encoder": {"layers": 1, "attention": "mma"},
         "decoder": {"layers": 1}}


def test_preset_comes_from_the_environment_and_defaults_to_tiny(monkeypatch):
    monkeypatch.delenv("MMA_NMT_NOTEBOOK_PRESET", raising=False)
    assert notebook_scale().name == "tiny"
    monkeypatch.setenv("MMA_NMT_NOTEBOOK_PRESET", "full")
    assert notebook_scale().name == "full" and notebook_scale().train_lines is None
    monkeypatch.setenv("MMA_NMT_NOTEBOOK_PRESET", "huge")
    with pytest.raises(ValueError, match="MMA_NMT_NOTEBOOK_PRESET must be one of"):
        notebook_scale()


def test_run_config_carries_the_scale_and_a_config_hash_in_its_folder(tmp_path):
    run = notebook_run("mma", MODEL, SCALE, tmp_path)
    assert run.model.encoder.attention == "mma" and run.model.d_model == 32 and run.model.share_embeddings
    assert run.train.max_steps == 2 and run.train.threads == 1 and run.data.max_train_lines == 50
    assert run.prepared_dir() == tmp_path / "data" / "multi30k_de_en_bpe320_50"
    assert run.train.save_dir.startswith(str(tmp_path / "models" / "mma-test-"))
    assert notebook_run("mma", MODEL, SCALE, tmp_path).train.save_dir == run.train.save_dir
    other = notebook_run("mma", {**MODEL, "dropout": 0.0}, SCALE, tmp_path)
    assert other.train.save_dir != run.train.save_dir  # a changed config never loads the other's model


def test_train_or_load_trains_once_then_loads_the_finished_run(tmp_path, shared_data, monkeypatch):
    monkeypatch.setenv("MMA_NMT_DATA_DIR", str(shared_data))
    first = train_or_load(notebook_run("mma", MODEL, SCALE, tmp_path))
    assert not first.from_cache and first.steps == 2 and not first.model.training
    assert len(first.dataset("test")) == 1000  # Multi30k test_2016_flickr
    second = train_or_load(notebook_run("mma", MODEL, SCALE, tmp_path))
    assert second.from_cache and second.steps == 2 and second.seconds == 0.0
    for (name, a), (_, b) in zip(first.model.state_dict().items(), second.model.state_dict().items()):
        torch.testing.assert_close(a, b, msg=name)
    assert "loaded from" in second.summary() and "trained in" in first.summary()


def test_figures_go_to_the_notebook_folder_or_the_environment_and_are_saved_before_display(tmp_path, monkeypatch):
    pytest.importorskip("IPython")
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    from mma_nmt.demos.notebook_figures import figure_dir, figure_shower

    monkeypatch.delenv("MMA_NMT_NOTEBOOK_OUT", raising=False)
    assert figure_dir("01_mma") == Path("../runs/notebooks/01_mma")
    monkeypatch.setenv("MMA_NMT_NOTEBOOK_OUT", str(tmp_path / "figures"))
    show = figure_shower(figure_dir("01_mma"))
    fig, axis = plt.subplots()
    axis.plot([0, 1], [1, 0])
    show(fig, "line.png")
    png = tmp_path / "figures" / "line.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
