"""``python -m mma_nmt.demos.export_notebooks`` executes jupytext notebooks and writes them, outputs included, as HTML."""

from __future__ import annotations

import pytest

pytest.importorskip("nbconvert")

from mma_nmt.demos.export_notebooks import main  # noqa: E402


def test_a_notebook_is_executed_and_written_as_html_with_its_outputs(tmp_path, monkeypatch, capsys):
    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    (notebooks / "01_small.py").write_text('# %% [markdown]\n# # A small notebook\n\n# %%\nimport os\n'
                                           'print("answer", 6 * 7, os.path.basename(os.getcwd()))\n')
    (notebooks / "02_other.py").write_text('# %%\nprint("not asked for")\n')
    monkeypatch.setenv("MPLBACKEND", "Agg")
    assert main(["01_small", "--notebooks", str(notebooks), "--out-dir", str(tmp_path / "html")]) == 0
    page = (tmp_path / "html" / "01_small.html").read_text(encoding="utf-8")
    assert "A small notebook" in page and "answer 42 notebooks" in page  # executed in the notebook's own folder
    assert not (tmp_path / "html" / "02_other.html").exists()
    assert "01_small.py: executed and written to" in capsys.readouterr().out


def test_an_unknown_notebook_name_is_refused(tmp_path):
    with pytest.raises(SystemExit) as stop:
        main(["99_none", "--notebooks", str(tmp_path)])
    assert stop.value.code == 2
