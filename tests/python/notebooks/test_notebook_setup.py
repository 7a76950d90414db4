"""Every notebook starts with one call, :func:`mma_nmt.demos.notebook_setup.start_notebook` (issue 53: the five paper
notebooks repeated a six-line setup block). Its first code cell (imports and setup) runs here in a few seconds; the
whole notebooks run in ``test_notebooks.py``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from mma_nmt.demos.notebook_setup import start_notebook

jupytext = pytest.importorskip("jupytext")
pytest.importorskip("IPython")

REPO = Path(__file__).resolve().parents[3]
NOTEBOOKS = sorted((REPO / "notebooks").glob("*.py"))


@pytest.fixture
def notebook_env(tmp_path, monkeypatch):
    monkeypatch.setenv("MMA_NMT_NOTEBOOK_PRESET", "tiny")
    monkeypatch.setenv("MMA_NMT_NOTEBOOK_OUT", str(tmp_path / "figures"))
    monkeypatch.setenv("MMA_NMT_NOTEBOOK_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    return tmp_path


def test_start_notebook_gives_the_scale_cache_figures_seed_and_start_time(notebook_env):
    import matplotlib.pyplot as plt

    setup = start_notebook("01_mma", seed=3)
    drawn = torch.rand(4)
    torch.manual_seed(3)
    assert torch.equal(drawn, torch.rand(4))
    assert setup.scale.name == "tiny" and setup.cache == notebook_env / "cache"
    assert setup.out == notebook_env / "figures" and setup.started > 0
    fig, _ = plt.subplots()
    setup.show(fig, "empty.png")
    assert (notebook_env / "figures" / "empty.png").is_file()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_each_notebook_sets_up_with_the_helper_under_its_own_name(path, notebook_env):
    text = path.read_text(encoding="utf-8")
    assert re.findall(r"start_notebook\(\"([^\"]+)\"\)", text) == [path.stem]
    for copied in ("figure_dir(", "figure_shower(", "notebook_scale(", "cache_dir(", "torch.manual_seed("):
        assert copied not in text, f"{path.name} repeats the setup that start_notebook does ({copied})"
    first = next(cell for cell in jupytext.read(path).cells if cell.cell_type == "code")
    namespace: dict = {}
    exec(compile(first.source, str(path), "exec"), namespace)  # the imports and the setup
    assert namespace["OUT"] == notebook_env / "figures" and namespace["SCALE"].name == "tiny"
