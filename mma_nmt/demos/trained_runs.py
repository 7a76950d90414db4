"""Trained models already on disk, for the notebooks: the runs of ``mma-nmt experiment <paper>`` and the demo's run.

A notebook asks for the best finished run of some systems of its paper (``find_trained``); only when there is none does
it train its tiny model. Where to look is ``$MMA_NMT_NOTEBOOK_RUNS`` (the tests point it at an empty folder, so CI
always takes the tiny path), else ``../runs`` seen from ``notebooks/``, i.e. the repository's ``runs/``:

- ``<runs>/experiments/<scale>/<corpus>/<system>-<id>/`` with ``cell.json`` and ``result.json`` (finished runs only;
  ``smoke`` runs are skipped: they train for seconds);
- ``<runs>/*/translations/test.scores.json`` written by ``mma-nmt demo`` (it records the run config).

"Best" is the highest test BLEU among the matching runs of the highest scale (full before mini and the demo's run).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

RUNS_ENV = "MMA_NMT_NOTEBOOK_RUNS"
SCALE_RANK = {"full": 2, "mini": 1, "demo": 1}  # the demo's run is a mini-scale run of Multi30k


@dataclass(frozen=True)
class RunOnDisk:
    """A finished run: where it is, what it is, its test BLEU and its run config (paths made absolute)."""

    run_dir: Path
    checkpoint: Path
    experiment: str  # the paper's folder name, or "demo"
    system: str
    dataset: str
    scale: str
    bleu: float
    config: dict

    @property
    def prepared_dir(self) -> Path:
        """The run's prepared data folder (``data.out_dir``, absolute)."""
        return Path(self.config["data"]["out_dir"])

    def describe(self) -> str:
        what = "the demo's run" if self.experiment == "demo" else \
            f"mma-nmt experiment {self.experiment}: system {self.system} on {self.dataset} ({self.scale} scale)"
        return f"{what}, test BLEU {self.bleu:.2f}, {self.checkpoint}"


def runs_root(default: str | Path = "../runs") -> Path | None:
    """``$MMA_NMT_NOTEBOOK_RUNS`` (``none`` or empty: search nowhere), else ``default`` (relative to the notebook)."""
    value = os.environ.get(RUNS_ENV)
    if value is None:
        return Path(default)
    return None if value.strip().lower() in ("", "none") else Path(value)


def _absolute(config: dict, base: Path) -> dict:
    """``data.out_dir`` resolved against ``base`` (runs are configured relative to the repository root)."""
    config = json.loads(json.dumps(config))
    data = config.setdefault("data", {})
    out_dir = Path(data.get("out_dir", "runs/data/multi30k_de_en"))
    data["out_dir"] = str(out_dir if out_dir.is_absolute() else base / out_dir)
    return config


def _read(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def experiment_runs(root: Path, paper: str) -> list[RunOnDisk]:
    """Every finished, non-smoke run of ``paper`` under ``<root>/experiments``."""
    found = []
    for cell_file in sorted(Path(root).glob("experiments/*/*/*/cell.json")):
        cell, result = _read(cell_file), _read(cell_file.parent / "result.json")
        if not cell or not result or cell.get("experiment") != paper or cell.get("scale") not in SCALE_RANK:
            continue
        run_dir = cell_file.parent
        config = _absolute(cell["config"], Path(root).resolve().parent)
        config.setdefault("train", {})["save_dir"] = str(run_dir.resolve())
        found.append(RunOnDisk(run_dir=run_dir, checkpoint=run_dir / result.get("checkpoint", "best.pt"),
                               experiment=paper, system=cell["system"], dataset=cell["dataset"], scale=cell["scale"],
                               bleu=float(result["bleu"]), config=config))
    return found


def demo_runs(root: Path) -> list[RunOnDisk]:
    """Runs of ``mma-nmt demo`` under ``root`` (they write ``translations/test.scores.json`` with their config)."""
    found = []
    for scores_file in sorted(Path(root).glob("*/translations/test.scores.json")):
        scores = _read(scores_file)
        if not scores or "run_config" not in scores:
            continue
        run_dir = scores_file.parent.parent
        checkpoint = run_dir / "best.pt" if (run_dir / "best.pt").is_file() else run_dir / "last.pt"
        found.append(RunOnDisk(run_dir=run_dir, checkpoint=checkpoint, experiment="demo", system="demo",
                               dataset=scores["run_config"].get("data", {}).get("corpus", "?"), scale="demo",
                               bleu=float(scores["bleu"]), config=scores["run_config"]))
    return found


def run_languages(run: RunOnDisk) -> tuple[str, str] | None:
    """(source, target) language of a run's prepared data, from its ``meta.json``."""
    meta = _read(run.prepared_dir / "meta.json")
    corpus = (meta or {}).get("corpus", {})
    return (corpus["src_lang"], corpus["tgt_lang"]) if "src_lang" in corpus and "tgt_lang" in corpus else None


def best_run(paper: str, systems: tuple[str, ...], *, demo: bool = False, languages: set[str] | None = None,
             prepared: str | Path | None = None, root: Path | None = None) -> RunOnDisk | None:
    """The best finished run of one of ``systems`` of ``paper`` (and the demo's run when ``demo``) whose checkpoint
    and prepared data exist. ``languages`` (e.g. ``{"de", "en"}``) keeps the runs between those two languages, in
    either direction; ``prepared`` the runs on that prepared data folder. None when there is none (or no folder to
    search)."""
    root = runs_root() if root is None else root
    if root is None or not Path(root).is_dir():
        return None
    candidates = [r for r in experiment_runs(root, paper) if r.system in systems]
    if demo:
        candidates += demo_runs(root)
    candidates = [r for r in candidates if r.checkpoint.is_file() and run_languages(r) is not None
                  and (languages is None or set(run_languages(r)) == set(languages))
                  and (prepared is None or r.prepared_dir == Path(prepared))]
    return max(candidates, key=lambda r: (SCALE_RANK[r.scale], r.bleu), default=None)
