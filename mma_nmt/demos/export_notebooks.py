"""Executes the notebooks (``notebooks/*.py``, jupytext percent scripts) and writes each, with its outputs, as HTML that
reads without Jupyter (the interactive attention views keep working: they need no kernel).

    python -m mma_nmt.demos.export_notebooks                   # every notebook -> runs/notebooks/html/<name>.html
    python -m mma_nmt.demos.export_notebooks 01_mma 05_gmm --out-dir /tmp/html

Each notebook runs in its own folder (as in Jupyter), with the preset of ``MMA_NMT_NOTEBOOK_PRESET`` (default tiny)
and the trained models it finds (``mma_nmt.demos.trained_runs``). Needs jupytext, nbclient, nbconvert and ipykernel
(``pip install -e ".[test]"``).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def execute_notebook(path: Path, *, timeout: int = 1800):
    """The notebook of the jupytext script ``path``, executed top to bottom in ``path``'s folder."""
    import jupytext
    import nbclient

    notebook = jupytext.read(path)
    nbclient.NotebookClient(notebook, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}}).execute()
    return notebook


def export_html(notebook, out: Path) -> Path:
    """Writes an executed notebook as a standalone HTML page."""
    import nbconvert

    body, _ = nbconvert.HTMLExporter().from_notebook_node(notebook)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(body, encoding="utf-8")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mma_nmt.demos.export_notebooks",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("names", nargs="*", help="notebook names (e.g. 01_mma); default: all")
    parser.add_argument("--notebooks", default=str(REPO / "notebooks"), help="folder of the .py notebooks")
    parser.add_argument("--out-dir", default=str(REPO / "runs" / "notebooks" / "html"))
    parser.add_argument("--timeout", type=int, default=1800, help="seconds per cell")
    args = parser.parse_args(argv)
    paths = sorted(Path(args.notebooks).glob("*.py"))
    if args.names:
        paths = [p for p in paths if p.stem in args.names]
        missing = sorted(set(args.names) - {p.stem for p in paths})
        if missing:
            parser.error(f"no notebook(s) {missing} in {args.notebooks}")
    for path in paths:
        started = time.monotonic()
        out = export_html(execute_notebook(path, timeout=args.timeout), Path(args.out_dir) / f"{path.stem}.html")
        print(f"{path.name}: executed and written to {out} in {time.monotonic() - started:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
