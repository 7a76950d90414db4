"""Where a notebook's figures go, and how it shows them: saved as PNG under the notebook's output folder and displayed
from that file, so the same cell works in Jupyter and when the notebook is executed headless (CI)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

OUT_ENV = "MMA_NMT_NOTEBOOK_OUT"


def figure_dir(notebook: str) -> Path:
    """``$MMA_NMT_NOTEBOOK_OUT``, else ``../runs/notebooks/<notebook>`` (relative to the notebook's folder)."""
    return Path(os.environ.get(OUT_ENV, f"../runs/notebooks/{notebook}"))


def figure_shower(out: Path) -> Callable[[object, str], None]:
    """``show(fig, name)``: saves ``fig`` as ``out / name`` and displays the PNG."""
    from IPython.display import Image, display  # notebooks only: the library itself does not need IPython

    from mma_nmt.analysis import save_figure

    def show(fig, name: str) -> None:
        display(Image(filename=str(save_figure(fig, out / name))))

    return show
