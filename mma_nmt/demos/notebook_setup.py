"""The setup every notebook starts with, in one call: its scale and cache (``MMA_NMT_NOTEBOOK_PRESET``,
``MMA_NMT_NOTEBOOK_CACHE``), where its figures go and how it shows them, a fixed seed and its start time::

    SCALE, CACHE, OUT, show, started = start_notebook("01_mma")
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, NamedTuple

import torch

from mma_nmt.demos.notebook_figures import figure_dir, figure_shower
from mma_nmt.demos.notebook_models import NotebookScale, cache_dir, notebook_scale


class NotebookSetup(NamedTuple):
    scale: NotebookScale  # notebook_scale(): the preset's data, model and training sizes
    cache: Path  # cache_dir(): prepared data and the notebook's own models
    out: Path  # figure_dir(notebook): where the figures are saved
    show: Callable[[object, str], None]  # figure_shower(out): show(fig, "name.png") saves and displays a figure
    started: float  # time.time() when the notebook started (for its closing "done in ... s")


def start_notebook(notebook: str, *, seed: int = 0) -> NotebookSetup:
    """Seeds torch with ``seed`` and returns the setup of notebook ``notebook`` (its file name without ``.py``)."""
    torch.manual_seed(seed)
    out = figure_dir(notebook)
    return NotebookSetup(scale=notebook_scale(), cache=cache_dir(), out=out, show=figure_shower(out),
                         started=time.time())
