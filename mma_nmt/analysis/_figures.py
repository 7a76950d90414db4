"""Figure helpers shared by the analyses.

Figures are built with :class:`matplotlib.figure.Figure` directly, never through ``pyplot``: nothing opens a window, no
global figure list grows, and the same code runs headless (CI) and in notebooks (Jupyter shows a returned ``Figure``).
:func:`save_figure` writes with the Agg canvas whatever backend is active.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure


def new_figure(width: float, height: float) -> Figure:
    """A ``width`` x ``height`` inch figure, constrained layout, on an Agg canvas (no display needed)."""
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def save_figure(fig: Figure, path: str | Path, *, dpi: int = 110) -> Path:
    """Writes ``fig`` to ``path`` (format from the suffix, e.g. ``.png``), creating folders; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi, bbox_inches="tight")
    return path


def label_axes(ax, *, rows: Sequence[str] | None, cols: Sequence[str] | None, fontsize: float = 6) -> None:
    """Token labels on a heatmap: ``rows`` down the y axis (queries), ``cols`` along the x axis (keys)."""
    if cols is not None:
        ax.set_xticks(range(len(cols)), list(cols), rotation=90, fontsize=fontsize)
    else:
        ax.set_xticks([])
    if rows is not None:
        ax.set_yticks(range(len(rows)), list(rows), fontsize=fontsize)
    else:
        ax.set_yticks([])
