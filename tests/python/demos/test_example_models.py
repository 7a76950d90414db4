"""The converged example models under ``examples/`` (mma_nmt.demos.example_models): the registry names committed
records, each committed example loads, translates as its committed translations and scores as its card says, the
README lists what is there, and the notebooks open on an example when no run is on disk."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from mma_nmt import Translator
from mma_nmt.data import ParallelDataset
from mma_nmt.data.fileio import read_text_lines, sha256_file
from mma_nmt.demos import example_models
from mma_nmt.demos.example_models import (CARD_FILE, EXAMPLES, HYPOTHESES_FILE, example_export, raw_test_split,
                                          read_card, write_readme)
from mma_nmt.evaluation.scoring import score_corpus

REPO = Path(__file__).resolve().parents[3]
COMMITTED = [name for name in EXAMPLES if (REPO / "examples" / name / CARD_FILE).is_file()]
FIRST = 12  # test sentences re-translated per committed example
MODEL = {"preset": "transformer_tiny", "d_model": 32, "ffn_dim": 64,
         "encoder": {"layers": 1, "attention": "mma", "head_spec": "GLFB"}, "decoder": {"layers": 1}}


def test_every_example_retrains_a_committed_to_patience_record_of_its_paper():
    from mma_nmt.experiments.spec import load_experiment

    for example in EXAMPLES.values():
        record = json.loads(example.record_path.read_text(encoding="utf-8"))
        experiment = load_experiment(REPO / "experiments" / example.paper / "experiment.toml")
        assert experiment.cell(example.system, example.dataset, "mini", seed=1).identity == record["identity"]
        assert record["experiment"] == example.paper and record["system"] == example.system, example.name
        assert record["seed"] == 1 and record["dataset"] == example.dataset and record["scale"] == "mini"
        assert record["stopping"]["reason"] == "patience", example.name
        assert example.dtype in ("float32", "float16")


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_a_retraining_cell_is_the_record_config_that_build_accepts(name, tmp_path):
    from mma_nmt.experiments.runner import read_json
    from mma_nmt.training.config import run_config_from_dict

    run_dir = tmp_path / "run"
    cell_file = example_models.write_retraining_cell(name, run_dir)
    cell = read_json(cell_file)
    record = json.loads(EXAMPLES[name].record_path.read_text(encoding="utf-8"))
    assert cell["config"] == record["config"] and cell["identity"] == record["identity"]
    run_config_from_dict(cell["config"])  # the runner can read it
    assert example_models.write_retraining_cell(name, run_dir) == cell_file  # a resumed retraining keeps its cell
    other = next(n for n in EXAMPLES if EXAMPLES[n].record_path.read_text() != EXAMPLES[name].record_path.read_text()
                 and json.loads(EXAMPLES[n].record_path.read_text())["config"] != record["config"])
    with pytest.raises(ValueError, match="another run's config"):
        example_models.write_retraining_cell(other, run_dir)


def test_examples_folder_comes_from_the_environment_or_the_checkout(monkeypatch, tmp_path):
    monkeypatch.setenv(example_models.EXAMPLES_ENV, "none")
    assert example_models.examples_dir() is None and example_export("mma_multi30k_de_en") is None
    monkeypatch.setenv(example_models.EXAMPLES_ENV, str(tmp_path))
    assert example_models.examples_dir() == tmp_path and example_export("mma_multi30k_de_en") is None
    with pytest.raises(KeyError, match="no example model 'nope'"):
        example_export("nope")


def test_the_readme_lists_every_committed_example(tmp_path):
    assert "mma_multi30k_de_en" in COMMITTED, "the MMA example (the README's quick command's model) is missing"
    for name in COMMITTED:
        (tmp_path / name).mkdir()
        (tmp_path / name / CARD_FILE).write_bytes((REPO / "examples" / name / CARD_FILE).read_bytes())
    write_readme(tmp_path)
    assert (tmp_path / "README.md").read_text(encoding="utf-8") == \
        (REPO / "examples" / "README.md").read_text(encoding="utf-8"), \
        "examples/README.md is stale: python -m mma_nmt.demos.example_models readme"


@pytest.mark.parametrize("name", COMMITTED)
def test_a_committed_example_translates_and_scores_as_its_card_says(name, shared_data, monkeypatch):
    monkeypatch.setenv("MMA_NMT_DATA_DIR", str(shared_data))
    folder = REPO / "examples" / name
    card, example = read_card(folder), EXAMPLES[name]
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    assert config["weights_dtype"] == example.dtype == card["export"]["dtype"]
    assert config["exported_from"]["retrains_record"] == example.record
    assert sha256_file(folder / "model.safetensors") == card["export"]["weights_sha256"]
    run_record = json.loads((folder / card["run"]["record"]).read_text(encoding="utf-8"))
    original = json.loads(example.record_path.read_text(encoding="utf-8"))
    assert run_record["config"] == original["config"] and run_record["identity"] == original["identity"]
    assert run_record["metrics"]["bleu"] == card["run"]["bleu"]
    sources, references = raw_test_split(original["corpus"])
    hypotheses = read_text_lines(folder / HYPOTHESES_FILE)
    assert len(hypotheses) == len(references) == card["export"]["sentences"]
    assert score_corpus(hypotheses, references, lang=config["corpus"]["tgt_lang"]).bleu == card["export"]["bleu"]
    translator = Translator.from_pretrained(folder, device="cpu")
    assert translator.translate(sources[:FIRST]) == hypotheses[:FIRST]


def _scale():
    from mma_nmt.demos.notebook_models import NotebookScale

    return NotebookScale("test", train_lines=50, vocab_size=320, steps=2, max_tokens=400, warmup_steps=1, lr=0.001,
                         test_sentences=1, analysis_sentences=1, gold_pairs=1)


def _tiny_example(tmp_path: Path) -> Path:
    """A 2-step notebook model exported (float16) and carded as example ``mma_multi30k_de_en`` under
    ``tmp_path/examples``; returns its prepared data folder."""
    from mma_nmt.config_io import to_dict
    from mma_nmt.data.fileio import atomic_write_json
    from mma_nmt.demos.notebook_models import notebook_run, train_or_load
    from mma_nmt.export import export_run

    trained = train_or_load(notebook_run("mma", MODEL, _scale(), tmp_path / "cache"))
    config = tmp_path / "run_config.json"
    config.write_text(json.dumps(to_dict(trained.run)), encoding="utf-8")
    folder = export_run(trained.run.train.save_dir, tmp_path / "examples" / "mma_multi30k_de_en", config=config,
                        dtype="float16")
    atomic_write_json(folder / CARD_FILE, {"label": "tiny", "run": {"stopping": {"best_update": 2}},
                                           "export": {"bleu": 0.0}})
    return trained.run.prepared_dir()


def test_a_notebook_opens_on_the_example_when_no_run_is_on_disk(tmp_path, shared_data, monkeypatch):
    from mma_nmt.demos.notebook_models import NotebookModel, models_for_notebook

    monkeypatch.setenv("MMA_NMT_DATA_DIR", str(shared_data))
    prepared = _tiny_example(tmp_path)
    monkeypatch.setenv("MMA_NMT_NOTEBOOK_RUNS", "none")
    monkeypatch.setenv(example_models.EXAMPLES_ENV, str(tmp_path / "examples"))
    wanted = {"MMA": NotebookModel(("mma",), "mma", MODEL, example="mma_multi30k_de_en")}
    found = models_for_notebook("mma", wanted, _scale(), tmp_path / "unused_cache")["MMA"]
    assert found.example == tmp_path / "examples" / "mma_multi30k_de_en" and "example model" in found.summary()
    assert found.run.model.encoder.head_spec == "GLFB" and not found.model.training
    assert not (tmp_path / "unused_cache").exists()  # nothing trained
    test, prepared_test = found.dataset("test"), ParallelDataset.load(prepared, "test")
    assert test.src_text == prepared_test.src_text and test.tgt_text == prepared_test.tgt_text
    for key in ("name", "src_lang", "tgt_lang"):  # what the notebooks read of a prepared split's meta
        assert test.meta["corpus"][key] == prepared_test.meta["corpus"][key]
    assert all(torch.equal(a, b) for a, b in zip(test.src, prepared_test.src))  # the same ids as prepare's
    assert all(torch.equal(a, b) for a, b in zip(test.tgt, prepared_test.tgt))
    with pytest.raises(ValueError, match="test split only"):
        found.dataset("valid")
    # A model to compare with that has no example: left out when optional, else the notebook trains its own models.
    compare = NotebookModel(("baseline",), "baseline", MODEL)
    with_optional = models_for_notebook("mma", {**wanted, "baseline": dataclasses.replace(compare, optional=True)},
                                        _scale(), tmp_path / "unused_cache")
    assert list(with_optional) == ["MMA"] and with_optional["MMA"].example is not None
    assert not (tmp_path / "unused_cache").exists()
    with pytest.raises(ValueError, match="cannot be optional"):
        models_for_notebook("mma", {"baseline": dataclasses.replace(compare, optional=True), **wanted}, _scale(),
                            tmp_path / "unused_cache")
    monkeypatch.setenv(example_models.EXAMPLES_ENV, "none")  # no examples: the notebook's own model (cached)
    own = models_for_notebook("mma", wanted, _scale(), tmp_path / "cache")["MMA"]
    assert own.example is None and own.from_cache and "the notebook's own" in own.summary()
