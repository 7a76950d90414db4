"""One table cell end to end: train (resuming), translate the test split, score, write ``result.json``.

A cell lives in its own run directory holding ``cell.json`` (the run config and the experiment's names for it). It is
finished when ``result.json`` exists; otherwise running it again continues training from ``last.pt``.

``python -m mma_nmt.experiments.cell <run_dir>`` runs one cell in a fresh process (the table runner does this to run
several cells side by side).
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

from mma_nmt.data.fileio import atomic_write_json
from mma_nmt.evaluation.multi_reference import multi_reference_scores
from mma_nmt.experiments.records import log_events, training_minutes, training_segments
from mma_nmt.training.config import run_config_from_dict

CELL_FILE, RESULT_FILE = "cell.json", "result.json"


def read_json(path: Path) -> dict:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def is_finished(run_dir: Path) -> bool:
    return (Path(run_dir) / RESULT_FILE).is_file()


def _training_stats(log_path: Path) -> dict:
    """Parameters, median training tokens/s, steps and training minutes (over every segment, killed ones included)
    from the log."""
    events = log_events(log_path)
    speeds = [e["tokens_per_s"] for e in events if e["event"] == "train" and "tokens_per_s" in e]
    starts = [e for e in events if e["event"] == "start"]
    ends = [e for e in events if e["event"] == "end"]
    segments = training_segments(events)
    return {"parameters": starts[-1]["parameters"] if starts else None,
            "train_tokens_per_s": statistics.median(speeds) if speeds else None,
            "train_steps": ends[-1]["step"] if ends else None,
            "train_minutes": round(training_minutes(segments), 2),
            "train_segments": segments,
            "valid_nll": ends[-1].get("valid_nll") if ends else None,
            "resumed": sum(1 for e in events if e["event"] == "resume")}


def _checkpoint_for_decoding(run_dir: Path, average_last: int) -> Path:
    from mma_nmt.training.checkpoint import CheckpointManager, average_checkpoints, save_checkpoint

    if average_last > 0:
        periodic = CheckpointManager(run_dir).periodic()[-average_last:]
        if len(periodic) < average_last:
            raise RuntimeError(f"{run_dir}: average_last={average_last} but only {len(periodic)} periodic "
                               f"checkpoints were kept; raise train.keep_periodic")
        return save_checkpoint(average_checkpoints(periodic), run_dir / "averaged.pt")
    best = run_dir / "best.pt"
    return best if best.is_file() else run_dir / "last.pt"


def run_cell(run_dir: str | Path, *, progress: bool = True) -> dict:
    """Runs (or finishes) the cell in ``run_dir``; returns its result."""
    from mma_nmt import pipeline
    from mma_nmt.experiments.records import software
    from mma_nmt.training.hardware import hardware
    from mma_nmt.training.trainer import Trainer

    run_dir = Path(run_dir)
    if is_finished(run_dir):
        return read_json(run_dir / RESULT_FILE)
    cell = read_json(run_dir / CELL_FILE)
    config = json.loads(json.dumps(cell["config"]))
    config.setdefault("train", {}).update(save_dir=str(run_dir), progress=progress)
    run = run_config_from_dict(config)
    started = time.monotonic()
    if not (run.prepared_dir() / "meta.json").is_file():
        pipeline.prepare_data(run)
    trainer = Trainer(run)
    trainer.train()
    checkpoint = _checkpoint_for_decoding(run_dir, cell.get("average_last", 0))
    decode_started = time.monotonic()
    hypotheses = pipeline.translate(run, checkpoint=str(checkpoint))
    decode_seconds = time.monotonic() - decode_started
    scores = pipeline.evaluate(run, hypotheses=str(hypotheses))
    multi = multi_reference_scores(run, hypotheses)
    if multi is not None:
        scores["multi_reference"] = multi  # its own key: its signature must not replace the single-reference one
    result = {**{k: cell[k] for k in ("experiment", "system", "dataset", "scale", "identity")},
              **scores, **_training_stats(run_dir / "log.jsonl"),
              "decode_sentences_per_s": scores["sentences"] / max(decode_seconds, 1e-9),
              "checkpoint": checkpoint.name, "hypotheses": str(hypotheses), "seed": run.train.seed,
              "wall_minutes_this_run": round((time.monotonic() - started) / 60.0, 2),
              "hardware": hardware(str(trainer.device), run.train.threads),
              "software": software(Path(__file__).resolve().parent),
              "finished": time.strftime("%Y-%m-%d %H:%M:%S")}
    atomic_write_json(run_dir / RESULT_FILE, result)
    return result


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m mma_nmt.experiments.cell <run_dir>", file=sys.stderr)
        return 2
    run_cell(args[0], progress=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
