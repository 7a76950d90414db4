"""Raising a run's update cap continues the capped run instead of training again from update 0.

A run is a function of its config, and ``train.max_steps`` only says where it stops: the run with cap N2 > N1 is the
run with cap N1 followed by updates N1 + 1 .. N2, as long as nothing else reads the cap. Only the cosine schedule
does (its cycle length defaults to ``max_steps``), and a run validates where its cap stops it, which the longer run
does only when validations fall on that update. So when a cell has no checkpoint yet, and a finished run of the same
scale holds the same config except a lower cap (a multiple of ``train.validate_every``; no cosine schedule sized by
the cap), the cell starts from a copy of that run's checkpoints and log: the trainer resumes at the lower cap's update
exactly as an interrupted run resumes (weights, optimizer, schedule, data position, RNG, early-stopping state), and
trains on until its own cap or its patience stops it. The copy's ``log.jsonl`` gains a ``continue`` event naming the
run it came from; the record keeps it as ``continued_from``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from mma_nmt.experiments.cell import CELL_FILE, RESULT_FILE, is_finished, read_json
from mma_nmt.experiments.records import CONTINUE_EVENT, log_events
from mma_nmt.experiments.spec import PlannedRun, identity_config
from mma_nmt.training.logging import JsonLinesLogger
from mma_nmt.training.run_lock import existing_checkpoints

# A continued run copies the capped one's checkpoints (what training resumes from, and the periodic ones for
# averaging) and this log, which it extends; not the translations, scores or process logs of the capped run.
_LOG = "log.jsonl"


def holds_run(run_dir: Path) -> bool:
    """Whether ``run_dir`` holds a run's checkpoints or log (what a continuation must never replace)."""
    return bool(existing_checkpoints(run_dir)) or (Path(run_dir) / _LOG).exists()


def _without_cap(config: dict) -> dict:
    config = identity_config(config)
    config.get("train", {}).pop("max_steps", None)
    return config


def _cap(config: dict) -> int:
    return int(config.get("train", {}).get("max_steps", 0) or 0)


def _schedule_reads_cap(config: dict) -> bool:
    optim = config.get("train", {}).get("optim", {})
    return optim.get("schedule") == "cosine" and not optim.get("total_steps")


def _validated_at_cap_anyway(config: dict, cap: int) -> bool:
    """Whether a run that goes past ``cap`` validates at ``cap`` too. A run validates once more where its cap stops
    it; that validation counts for early stopping and for the plateau schedule, so only when the longer run would
    have validated there as well is the capped run its prefix."""
    every = int(config.get("train", {}).get("validate_every", 0) or 0)
    return every > 0 and cap % every == 0


def extends(config: dict, capped: dict) -> bool:
    """Whether the run of ``config`` is the run of ``capped`` trained on: the same config except a higher cap, the
    lower one a multiple of ``train.validate_every``, and no schedule that reads the cap."""
    cap, capped_cap = _cap(config), _cap(capped)
    return (0 < capped_cap < cap and not _schedule_reads_cap(config) and _validated_at_cap_anyway(config, capped_cap)
            and _without_cap(capped) == _without_cap(config))


def capped_predecessor(run: PlannedRun, runs_dir: Path) -> Path | None:
    """The finished run directory under ``runs_dir/<scale>`` whose config is ``run``'s with a lower, nonzero
    ``train.max_steps`` (the highest such cap) that is a multiple of ``train.validate_every``, or None. None too when
    the run has no cap or its schedule reads it."""
    found: list[tuple[int, Path]] = []
    for cell_file in sorted((Path(runs_dir) / run.scale).glob(f"*/*/{CELL_FILE}")):
        other = read_json(cell_file)
        if (extends(run.config, other.get("config", {})) and other.get("average_last", 0) == run.average_last
                and is_finished(cell_file.parent) and (cell_file.parent / "last.pt").is_file()):
            found.append((_cap(other["config"]), cell_file.parent))
    return max(found)[1] if found else None


def continue_from(predecessor: Path, run_dir: Path) -> dict:
    """Seeds ``run_dir`` (absent, or holding no run: :func:`holds_run`) with ``predecessor``'s checkpoints and log
    and logs the ``continue`` event; returns that event. The copy is
    assembled beside ``run_dir`` and renamed into place, so a kill leaves either the untouched directory (the next
    command continues again) or the whole copy (it resumes), never checkpoints without the log that explains them."""
    predecessor, run_dir = Path(predecessor), Path(run_dir)
    if holds_run(run_dir):
        raise FileExistsError(f"{run_dir} already holds a run; it continues from its own last.pt, not from "
                              f"{predecessor}")
    result = read_json(predecessor / RESULT_FILE)
    staging = run_dir.with_name(f".{run_dir.name}.continuing")
    shutil.rmtree(staging, ignore_errors=True)  # left by a kill during an earlier copy
    staging.mkdir(parents=True)
    if (run_dir / CELL_FILE).is_file():
        shutil.copy2(run_dir / CELL_FILE, staging / CELL_FILE)
    for path in [*existing_checkpoints(predecessor), predecessor / _LOG]:
        shutil.copy2(path, staging / path.name)
    ends = log_events(staging / _LOG, "end")
    event = JsonLinesLogger(staging / _LOG).log(
        CONTINUE_EVENT, step=ends[-1]["step"] if ends else None, run=str(predecessor),
        identity=result.get("identity"), stopped=ends[-1].get("stopped") if ends else None,
        max_steps=_cap(read_json(predecessor / CELL_FILE)["config"]), hardware=result.get("hardware"))
    shutil.rmtree(run_dir, ignore_errors=True)
    staging.rename(run_dir)
    return event
