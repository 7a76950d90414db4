"""Stages the runs trained on a lent GPU machine (``scripts/gpu_train_ahead.sh``) for fetching. ``STAGE/1`` holds
``runs_state.tgz`` (every run's log.jsonl and cell.json, the records and tables written since MARKER, and the
command's logs from LOGS, under ``gpu_logs/``) and the checkpoints that fit; ``STAGE/2``, ... the rest. A batch holds
at most 8 files and 60 MiB, checkpoints are cut into 15 MiB parts, and all parts of one checkpoint go in one batch,
most needed first: the last.pt of unfinished runs, then their best.pt where the last validation was not the best,
then the best.pt of runs finished there (for the analyses). Prints one line per run and the batches.

    python3 scripts/gpu_stage_runs.py STAGE MARKER LOGS
"""

from __future__ import annotations

import json
import shutil
import sys
import tarfile
from pathlib import Path

PART, BATCH_BYTES, BATCH_FILES = 15 * 2**20, 60 * 2**20, 8


def last_validation(log: Path) -> dict:
    events = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    valid = [e for e in events if e["event"] == "valid"]
    return valid[-1] if valid else {}


def split(path: Path, into: Path, name: str) -> list[Path]:
    data, parts = path.read_bytes(), []
    for index in range(0, max(len(data), 1), PART):
        part = into / f"{name}.part{index // PART:02d}"
        part.write_bytes(data[index:index + PART])
        parts.append(part)
    return parts


def main(stage: Path, marker: Path, logs: Path) -> None:
    shutil.rmtree(stage, ignore_errors=True)
    (stage / "parts").mkdir(parents=True)
    since = marker.stat().st_mtime
    groups: list[tuple[int, list[Path]]] = []  # (priority, parts of one checkpoint)
    for log in sorted(Path("runs/experiments").glob("*/*/*/log.jsonl")):
        run = log.parent
        valid, finished = last_validation(log), (run / "result.json").is_file()
        print(f"{run.name}: last validation at update {valid.get('step')} (best: {valid.get('best')}), "
              f"valid_nll {valid.get('valid_nll')}, finished: {finished}")
        wanted = [(2, "best.pt")] if finished else [(0, "last.pt")] + ([] if valid.get("best") else [(1, "best.pt")])
        for priority, checkpoint in wanted:
            if (run / checkpoint).is_file():
                groups.append((priority, split(run / checkpoint, stage / "parts", f"{run.name}__{checkpoint}")))
    state = stage / "runs_state.tgz"
    with tarfile.open(state, "w:gz") as tar:
        for path in sorted(Path("runs/experiments").glob("*/*/*/*")):
            if path.name in ("log.jsonl", "cell.json", "result.json") or path.name == "translations":
                tar.add(path)
        for path in sorted(Path("experiments").rglob("*")):
            if path.is_file() and "results" in path.parts and path.stat().st_mtime > since:
                tar.add(path)
        tar.add(logs, arcname="gpu_logs")
    batches: list[list[Path]] = [[state]]
    for _, parts in sorted(groups, key=lambda group: group[0]):
        size = sum(p.stat().st_size for p in parts)
        if size > BATCH_BYTES or len(parts) > BATCH_FILES:
            print(f"WARNING: {parts[0].name.split('.part')[0]} ({size} bytes) exceeds one call's limits; "
                  "its batch cannot come back whole")
        current = batches[-1]
        if len(current) + len(parts) > BATCH_FILES or sum(p.stat().st_size for p in current) + size > BATCH_BYTES:
            batches.append([])
        batches[-1].extend(parts)
    for number, files in enumerate(batches, start=1):
        (stage / str(number)).mkdir()
        for path in files:
            shutil.move(str(path), stage / str(number) / path.name)
        print(f"batch {number}: {' '.join(path.name for path in files)}")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]))
