"""Executes every notebooks/*.py (paired jupytext scripts) top to bottom on the tiny preset; fails on any cell error.

Environment: ``MMA_NMT_NOTEBOOK_PRESET`` (default ``tiny`` here), ``MMA_NMT_NOTEBOOK_TIMEOUT`` (seconds per cell,
default 600). Figures go to a temporary folder; the notebooks' cache (prepared data, trained models) to one temporary
folder per test session, so the data is prepared once and every model is trained from scratch. The notebooks search
an empty folder for trained runs (``MMA_NMT_NOTEBOOK_RUNS``) and no example models (``MMA_NMT_EXAMPLES=none``), so they
train their own tiny models here, whatever ``runs/`` holds; more tests open each notebook on its example models
(committed, or 2-update stand-ins of their architecture until they are), as a fresh clone does.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import jupytext  # the test extra installs jupytext, nbclient and ipykernel
import nbclient
import pytest

REPO = Path(__file__).resolve().parents[3]

NOTEBOOKS = sorted((REPO / "notebooks").glob("*.py"))


def test_there_is_at_least_one_notebook():
    assert NOTEBOOKS, f"no notebooks/*.py under {REPO}"


def _execute(path: Path, tmp_path, tmp_path_factory, shared_data, monkeypatch, *, examples: str) -> tuple[str, str]:
    """Runs the notebook at ``path`` on the tiny preset with no runs on disk; returns its printed text and HTML."""
    monkeypatch.setenv("MMA_NMT_NOTEBOOK_PRESET", os.environ.get("MMA_NMT_NOTEBOOK_PRESET", "tiny"))
    monkeypatch.setenv("MMA_NMT_NOTEBOOK_OUT", str(tmp_path / "figures"))
    monkeypatch.setenv("MMA_NMT_NOTEBOOK_CACHE", str(tmp_path_factory.getbasetemp() / "notebook_cache"))
    (tmp_path / "no_runs").mkdir()
    monkeypatch.setenv("MMA_NMT_NOTEBOOK_RUNS", str(tmp_path / "no_runs"))
    monkeypatch.setenv("MMA_NMT_EXAMPLES", examples)
    monkeypatch.setenv("MMA_NMT_DATA_DIR", str(shared_data))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    notebook = jupytext.read(path)
    client = nbclient.NotebookClient(notebook, timeout=int(os.environ.get("MMA_NMT_NOTEBOOK_TIMEOUT", "600")),
                                     kernel_name="python3", resources={"metadata": {"path": str(path.parent)}})
    started = time.time()
    client.execute()  # raises CellExecutionError, naming the cell, on the first error
    print(f"{path.name}: executed {len(notebook.cells)} cells in {time.time() - started:.1f} s")
    errors = [out for cell in notebook.cells for out in cell.get("outputs", []) if out.get("output_type") == "error"]
    assert not errors
    outputs = [out for cell in notebook.cells for out in cell.get("outputs", [])]
    text = "".join(out.get("text", "") for out in outputs if out.get("output_type") == "stream")
    html = "".join(out.get("data", {}).get("text/html", "") for out in outputs)
    assert 'class="mma-explorer"' in html  # the interactive attention view
    return text, html


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_top_to_bottom(path: Path, tmp_path, tmp_path_factory, shared_data, monkeypatch):
    text, _ = _execute(path, tmp_path, tmp_path_factory, shared_data, monkeypatch, examples="none")
    assert "the notebook's own" in text  # no run was found: it says that it trained (or reused) its own tiny model


# The example models each notebook opens on (notebooks/README.md); the extra lines each expects in its output.
OPENS_ON = {"01_mma": (("mma_multi30k_de_en", "baseline_multi30k_de_en"), ()),
            "02_lstm_multihead": (("lstm_h4_multi30k_en_de",), ()),
            "03_mlmha": (("mlmha_m10_multi30k_en_de",), ("MLMHA variant M-10",)),
            "04_multihop": (("multihop_multi30k_de_en",), ()),
            "05_gmm": (("gmm_multi30k_en_de",), ("the n-gram precision gap is skipped",))}


def test_every_notebook_names_example_models_that_exist():
    from mma_nmt.demos.example_models import EXAMPLES

    for path in NOTEBOOKS:
        named = set(re.findall(r'example(?:_export\(|=)"(\w+)"', path.read_text(encoding="utf-8")))
        assert named <= set(EXAMPLES), f"{path.name} names unknown example models {sorted(named - set(EXAMPLES))}"
        if path.stem in OPENS_ON:
            assert named == set(OPENS_ON[path.stem][0]), f"{path.name} opens on {sorted(named)}"


def _stand_in_example(name: str, folder: Path, cache: Path) -> None:
    """An export at ``folder`` with example ``name``'s architecture (its record's ``[model]``), trained 2 updates on
    the notebooks' tiny data, carded like an example: what a notebook opens on before the converged model is
    committed."""
    import dataclasses
    import json

    from mma_nmt.config_io import to_dict
    from mma_nmt.data.fileio import atomic_write_json
    from mma_nmt.demos.example_models import CARD_FILE, EXAMPLES
    from mma_nmt.demos.notebook_models import notebook_run, notebook_scale, train_or_load
    from mma_nmt.export import export_run

    model = json.loads(EXAMPLES[name].record_path.read_text(encoding="utf-8"))["config"]["model"]
    scale = dataclasses.replace(notebook_scale("tiny"), steps=2)
    trained = train_or_load(notebook_run(f"stand_in_{name}", model, scale, cache))
    config = folder.parent / f"{name}.run_config.json"
    # the sections as written, not to_dict(trained.run), whose model section of an LSTM does not read back
    config.write_text(json.dumps({"data": trained.run.data.to_section(), "model": {"share_embeddings": True, **model},
                                  "decode": to_dict(trained.run.decode)}), encoding="utf-8")
    export_run(trained.run.train.save_dir, folder, config=config, dtype=EXAMPLES[name].dtype)
    atomic_write_json(folder / CARD_FILE, {"label": "stand-in", "run": {"stopping": {"best_update": 2}},
                                           "export": {"bleu": 0.0}})


@pytest.mark.parametrize("stem", sorted(OPENS_ON))
def test_a_notebook_opens_on_its_examples(stem, tmp_path, tmp_path_factory, shared_data, monkeypatch):
    """Each notebook opens on its committed example models; one not committed yet (examples/README.md) is replaced by
    a 2-update stand-in of its architecture, so the wiring is tested either way. 01's are committed: their absence
    fails."""
    names, expected = OPENS_ON[stem]
    monkeypatch.setenv("MMA_NMT_DATA_DIR", str(shared_data))
    examples = tmp_path / "examples"
    examples.mkdir()
    for name in names:
        committed = REPO / "examples" / name
        if (committed / "card.json").is_file():
            (examples / name).symlink_to(committed)
            continue
        assert stem != "01_mma", f"example {name} is missing"
        _stand_in_example(name, examples / name, tmp_path_factory.getbasetemp() / "notebook_cache")
    text, _ = _execute(REPO / "notebooks" / f"{stem}.py", tmp_path, tmp_path_factory, shared_data, monkeypatch,
                       examples=str(examples))
    assert "the notebook's own" not in text
    for name in names:
        assert f"loaded the example model {examples / name}" in text
    for line in expected:
        assert line in text
