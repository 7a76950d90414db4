"""Run records: what a finished run leaves in the repository, so that tables survive machines and failures.

A record lives in ``experiments/<paper>/results/<scale>/runs/<dataset>/<system>-seed<k>-<identity>/``:

- ``record.json``: the cell's names and data label, the run config and its hash (the run identity), the seed, the
  stopping point (updates, epoch, why it stopped, the best validation's update, the checkpoint translated), the test
  metrics, the validation curve, training statistics, and the hardware and software it ran on;
- ``test.hyp.txt``: the test-set translations, from which the paired bootstrap is recomputed; ``record.json`` holds
  their sha256 (``translations_sha256``), and a record whose translations do not match it, or that has none, is
  refused (:func:`load_records`): a changed file would silently change a table's significance marks.

Tables are built from records only. A failed or interrupted run writes no record, so it can never erase a number a
finished run published; records are never overwritten.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
import time
from pathlib import Path

from mma_nmt.data.fileio import atomic_write_json
from mma_nmt.experiments.spec import PlannedRun
from mma_nmt.training.hardware import hardware

RECORD_FILE, HYPOTHESES_FILE = "record.json", "test.hyp.txt"
CHECKSUM_KEY = "translations_sha256"  # the sha256 of the record's test.hyp.txt, written with the record


class RecordError(ValueError):
    """A run record that cannot be trusted; the message names the file and the way out."""


def record_dir_for(run: PlannedRun, root: Path) -> Path:
    return Path(root) / run.dataset.role / f"{run.system.name}-seed{run.seed}-{run.identity}"


def file_sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def read_record(path: Path) -> dict:
    """The record in ``path`` (a ``record.json``) with ``hypotheses``, the path of its translations, added; refuses a
    file that is not a record and translations that are missing or do not match the record's checksum."""
    path = Path(path)
    way_out = f"restore the record's folder from git (git checkout -- {path.parent}) or delete it to rerun the run"
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        reason = str(error) if isinstance(error, json.JSONDecodeError) else "not UTF-8"
        raise RecordError(f"{path} is not a valid run record ({reason}): {way_out}") from None
    missing = [key for key in ("identity", "seed", "metrics") if not isinstance(record, dict) or key not in record]
    if missing:
        raise RecordError(f"{path} is not a valid run record (no {', '.join(missing)}): {way_out}")
    hypotheses = path.parent / HYPOTHESES_FILE
    if not hypotheses.is_file():
        raise RecordError(f"{path}: its translations {hypotheses} are missing: {way_out}")
    expected, actual = record.get(CHECKSUM_KEY), file_sha256(hypotheses)
    if not expected:
        raise RecordError(f"{path} has no {CHECKSUM_KEY} (the checksum of {hypotheses}), so its translations cannot "
                          f"be trusted: a record written before records had one is stamped, once its translations "
                          f"are checked against its scores, by python -m mma_nmt.experiments.stamp_records {path}")
    if actual != expected:
        raise RecordError(f"{path}: its translations {hypotheses} were changed after the run was scored (sha256 "
                          f"{actual[:12]}..., recorded {expected[:12]}...): {way_out}")
    record["hypotheses"] = str(hypotheses)
    return record


def load_records(root: Path) -> dict[str, dict]:
    """Every record under ``root`` by run identity (:func:`read_record`)."""
    found = {}
    for path in sorted(Path(root).glob(f"*/*/{RECORD_FILE}")):
        record = read_record(path)
        found.setdefault(record["identity"], record)
    return found


def code_commit(where: Path, *, mark_dirty: bool = False) -> str:
    """The commit of the code at ``where`` (``+dirty`` appended when ``mark_dirty`` and tracked files differ from it).
    ``MMA_NMT_GIT_COMMIT``, when set, names it instead: a copy of the tree sent to a lent GPU machine may carry git
    metadata that is not the sender's (one such copy reported a commit several days old), or none ("unknown")."""
    if os.environ.get("MMA_NMT_GIT_COMMIT"):
        return os.environ["MMA_NMT_GIT_COMMIT"]
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=where, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = mark_dirty and subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=where,
                                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


def software(where: Path) -> dict:
    """torch, Python and the commit of the code (:func:`code_commit`)."""
    import torch

    return {"torch": torch.__version__, "python": platform.python_version(), "git_commit": code_commit(where)}


def log_events(log_path: Path, kind: str | None = None) -> list[dict]:
    """The events of one kind (``valid``, ``end``, ...) of a run's ``log.jsonl``, or all of them, in order."""
    events = (json.loads(line) for line in Path(log_path).read_text(encoding="utf-8").splitlines() if line.strip())
    return [event for event in events if kind is None or event.get("event") == kind]


def learning_curve(log_path: Path) -> list[dict]:
    """The validations of a run (update, validation loss / NLL / BLEU), in order, from its ``log.jsonl``; a resumed run
    that validated one update twice keeps the later value."""
    points = {event["step"]: {key: event[key] for key in ("step", "valid_loss", "valid_nll", "valid_bleu")
                              if key in event} for event in log_events(log_path, "valid")}
    return [points[step] for step in sorted(points)]


def late_descent(curve: list[dict], window: int = 1000) -> float | None:
    """How much the validation NLL still fell over the last ``window`` updates before training stopped (last value
    minus the value ``window`` or more updates earlier; negative while it still falls): how flat the curve was where
    it stopped. None for a curve shorter than the window."""
    points = [p for p in curve if p.get("valid_nll") is not None]
    if not points:
        return None
    earlier = [p for p in points if p["step"] <= points[-1]["step"] - window]
    return points[-1]["valid_nll"] - earlier[-1]["valid_nll"] if earlier else None


def training_segments(events: list[dict]) -> list[dict]:
    """The training segments of a run's log: one per process that trained it, from its ``start`` event to its ``end``
    event or, when the process was killed, to its last logged event. Each gives the updates it began and stopped at,
    its wall-clock minutes, whether it ended normally and, where its ``start`` event logged it, the hardware it ran
    on. The updates a killed segment did after its last checkpoint are redone by the next one, so a segment may begin
    below where the previous one stopped."""
    segments, current, last = [], None, None

    def close(last: dict, ended: bool) -> None:
        segment = {"from_update": current["step"], "to_update": last.get("step", current["step"]),
                   "minutes": round((last["time"] - current["time"]) / 60.0, 2), "ended": ended}
        if "hardware" in current:  # logged by the trainer since 2026-11-27
            segment["hardware"] = current["hardware"]
        segments.append(segment)

    for event in events:
        if event["event"] == "resume":  # logged just before the ``start`` of the segment it begins
            continue
        if event["event"] == "start":
            if current is not None:
                close(last, ended=False)
            current = event
        last = event
        if event["event"] == "end" and current is not None:
            close(event, ended=True)
            current = None
    if current is not None:
        close(last, ended=False)
    return segments


def training_minutes(segments: list[dict]) -> float:
    """Wall-clock minutes of training summed over a run's segments (:func:`training_segments`), killed ones included."""
    return sum(segment["minutes"] for segment in segments)


CONTINUE_EVENT = "continue"  # logged by mma_nmt.experiments.runner when a run continues a capped one


def stopping_point(log_path: Path, checkpoint: str) -> dict:
    """Where and why training ended, from the last ``end`` event of the run's log; for a run that continued a capped
    run (:func:`~mma_nmt.experiments.runner.continue_from`), which one and from which update."""
    ends, continued = log_events(log_path, "end"), log_events(log_path, CONTINUE_EVENT)
    end = ends[-1] if ends else {}
    point = {"updates": end.get("step"), "epoch": end.get("epoch"), "reason": end.get("stopped", "max_steps"),
             "best_update": end.get("best_step"), "checkpoint": checkpoint}
    if continued:
        point["continued_from"] = {key: continued[-1].get(key)
                                   for key in ("step", "identity", "max_steps", "stopped", "hardware")}
    return point


_METRICS = ("bleu", "bleu_signature", "tokenized_bleu", "chrf", "ter", "sentences", "bleu_by_source_length",
            "multi_reference")
_TRAINING = ("parameters", "train_tokens_per_s", "train_steps", "train_minutes", "train_segments", "valid_nll",
             "resumed", "decode_sentences_per_s")


def write_record(run: PlannedRun, result: dict, root: Path) -> Path:
    """Writes the record of ``run``, finished in its run directory (its ``result.json`` contents in ``result``), under
    ``root``; an existing record of the same run is kept as it is. Returns the record's folder."""
    target = record_dir_for(run, root)
    if (target / RECORD_FILE).is_file():
        return target
    target.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(run.run_dir / "translations" / Path(result["hypotheses"]).name, target / HYPOTHESES_FILE)
    typed = run.run_config
    # a result.json written before results named their hardware (2026-11-24): this machine, "auto" read as the CPU
    device = "cpu" if typed.train.device == "auto" else typed.train.device
    record = {"experiment": result.get("experiment"), "system": run.system.name,
              "dataset": run.dataset.role, "data": run.dataset.data_label(run.scale),
              "corpus": typed.data.corpus, "test_split": typed.eval.split,
              "scale": run.scale, "identity": run.identity, "seed": run.seed, "config": run.config,
              "average_last": run.average_last,
              "stopping": stopping_point(run.run_dir / "log.jsonl", result.get("checkpoint", "best.pt")),
              "metrics": {key: result[key] for key in _METRICS if key in result},
              "training": {key: result.get(key) for key in _TRAINING},
              "curve": learning_curve(run.run_dir / "log.jsonl"),
              "hardware": result.get("hardware") or hardware(device, typed.train.threads),
              "software": result.get("software") or software(Path(__file__).parent),
              "finished": result.get("finished", time.strftime("%Y-%m-%d %H:%M:%S")),
              CHECKSUM_KEY: file_sha256(target / HYPOTHESES_FILE)}
    atomic_write_json(target / RECORD_FILE, record)
    return target


__all__ = ["RECORD_FILE", "HYPOTHESES_FILE", "CHECKSUM_KEY", "RecordError", "file_sha256", "read_record",
           "record_dir_for", "load_records", "write_record",
           "learning_curve", "late_descent", "stopping_point", "training_segments", "training_minutes", "software"]
