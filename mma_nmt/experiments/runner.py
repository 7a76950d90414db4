"""Trains, translates and scores the planned runs of one or more tables: each distinct run once (finished runs are
skipped, interrupted ones resume), ``jobs`` of them side by side.

A run lives in its own directory holding ``cell.json`` (the raw run config and the experiment's names for it). It is
finished when ``result.json`` exists; otherwise running it again continues training from ``last.pt``.
``python -m mma_nmt.experiments.runner <run_dir>`` runs one in a fresh process (the runner does this to run several
side by side, :mod:`mma_nmt.experiments.side_by_side`).

**A raised update cap continues the capped run** instead of training again from update 0. A run is a function of its
config, and ``train.max_steps`` only says where it stops: the run with cap N2 > N1 is the run with cap N1 followed by
updates N1 + 1 .. N2, as long as nothing else reads the cap. Only the cosine schedule does (its cycle length defaults
to ``max_steps``), and a run validates where its cap stops it, which the longer run does only when validations fall on
that update. So when a run has no checkpoint yet, and a finished run of the same scale holds the same config except a
lower cap (a multiple of ``train.validate_every``; no cosine schedule sized by the cap), the run starts from a copy of
that run's checkpoints and log: the trainer resumes at the lower cap's update exactly as an interrupted run resumes
(weights, optimizer, schedule, data position, RNG, early-stopping state), and trains on until its own cap or its
patience stops it. The copy's ``log.jsonl`` gains a ``continue`` event naming the run it came from; the record keeps
it as ``continued_from``.
"""

from __future__ import annotations

import json
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from mma_nmt import pipeline
from mma_nmt.data.fileio import atomic_write_json
from mma_nmt.evaluation.multi_reference import multi_reference_scores
from mma_nmt.experiments.records import CONTINUE_EVENT, log_events, software, training_minutes, training_segments
from mma_nmt.experiments.side_by_side import run_side_by_side
from mma_nmt.experiments.spec import Experiment, ExperimentError, PlannedRun, distinct, identity_config
from mma_nmt.training.checkpoint import CheckpointManager, average_checkpoints, save_checkpoint
from mma_nmt.training.config import run_config_from_dict
from mma_nmt.training.hardware import hardware
from mma_nmt.training.logging import JsonLinesLogger
from mma_nmt.training.run_lock import existing_checkpoints
from mma_nmt.training.trainer import Trainer

CELL_FILE, RESULT_FILE = "cell.json", "result.json"
# A continued run copies the capped one's checkpoints (what training resumes from, and the periodic ones for
# averaging) and this log, which it extends; not the translations, scores or process logs of the capped run.
_LOG = "log.jsonl"


def read_json(path: Path) -> dict:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def is_finished(run_dir: Path) -> bool:
    return (Path(run_dir) / RESULT_FILE).is_file()


def holds_run(run_dir: Path) -> bool:
    """Whether ``run_dir`` holds a run's checkpoints or log (what a continuation must never replace)."""
    return bool(existing_checkpoints(run_dir)) or (Path(run_dir) / _LOG).exists()


# ---- one run in its directory: train (resuming), translate the test split, score, write result.json ----

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
    if average_last > 0:
        periodic = CheckpointManager(run_dir).periodic()[-average_last:]
        if len(periodic) < average_last:
            raise RuntimeError(f"{run_dir}: average_last={average_last} but only {len(periodic)} periodic "
                               f"checkpoints were kept; raise train.keep_periodic")
        return save_checkpoint(average_checkpoints(periodic), run_dir / "averaged.pt")
    best = run_dir / "best.pt"
    return best if best.is_file() else run_dir / "last.pt"


def run_cell(run_dir: str | Path, *, progress: bool = True) -> dict:
    """Runs (or finishes) the run in ``run_dir``, as its ``cell.json`` says; returns its result."""
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


# ---- continuing a capped run (see the module docstring) ----

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
    """Whether the run of raw config ``config`` is the run of ``capped`` trained on: the same config except a higher
    cap, the lower one a multiple of ``train.validate_every``, and no schedule that reads the cap. Raw configs, as
    the identity hashes them: a finished run's comes from its ``cell.json``."""
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
    and logs the ``continue`` event; returns that event. The copy is assembled beside ``run_dir`` and renamed into
    place, so a kill leaves either the untouched directory (the next command continues again) or the whole copy (it
    resumes), never checkpoints without the log that explains them."""
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


# ---- the runs of a table ----

def check_prepared_dirs(runs: list[PlannedRun]) -> None:
    """Runs that share a prepared directory must prepare it the same way (else one would overwrite the other's)."""
    seen: dict[str, tuple[PlannedRun, dict]] = {}
    for run in runs:
        data = run.run_config.data.to_section()
        out_dir = data.get("out_dir", "")
        first = seen.setdefault(out_dir, (run, data))
        if first[1] != data:
            raise ExperimentError(
                f"{first[0].system.name} and {run.system.name} on {run.dataset.role} prepare {out_dir} with "
                f"different [data] settings ({first[1]} vs {data}); give one of them its own data.out_dir")


def _write_cell_file(run: PlannedRun, experiment: Experiment) -> None:
    path = run.run_dir / CELL_FILE
    if path.is_file():
        return
    run.run_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, {"experiment": experiment.name, "system": run.system.name, "dataset": run.dataset.role,
                             "scale": run.scale, "identity": run.identity, "average_last": run.average_last,
                             "config": run.config})


def _continue_capped_runs(runs: list[PlannedRun], runs_dir: Path) -> None:
    """A run that has not started and whose config is a finished run's with a higher cap continues that run."""
    for run in runs:
        if holds_run(run.run_dir):
            continue
        predecessor = capped_predecessor(run, runs_dir)
        if predecessor is not None:
            event = continue_from(predecessor, run.run_dir)
            print(f"[experiment] {run.system.name} on {run.dataset.role} continues {predecessor} from update "
                  f"{event['step']} (the same run with the cap raised from {event['max_steps']} to "
                  f"{run.run_config.train.max_steps})", flush=True)


def _prepare_all(runs: list[PlannedRun]) -> None:
    """Prepares every distinct corpus once, before any training starts (runs side by side must not race on it)."""
    for run in runs:
        pipeline.ensure_prepared(run.run_config, say=lambda text: print(f"[experiment] {text}", flush=True))


Ended = Callable[..., None]  # (run, its result or None, when it started, the error or None)


def _run_here(runs: list[PlannedRun], ended: Ended) -> None:
    """One run after the other in this process, with progress bars."""
    for run in runs:
        started = time.monotonic()
        print(f"[experiment] running {run.system.name} on {run.dataset.role} in {run.run_dir}", flush=True)
        try:
            ended(run, run_cell(run.run_dir), started, None)
        except Exception as error:  # keep going: one failed system must not lose the others
            ended(run, None, started, error)


def _run_in_processes(runs: list[PlannedRun], jobs: int, ended: Ended) -> None:
    """``jobs`` runs at a time, each in its own process (its output in ``<run_dir>/run.log``)."""
    by_dir = {run.run_dir: run for run in runs}

    def process_ended(run_dir: Path, code: int | None, started: float, error: Exception | None) -> None:
        if error is None and code != 0:
            error = RuntimeError(f"run {run_dir} failed with exit code {code}; see {run_dir / 'run.log'}")
        if error is not None:
            ended(by_dir[run_dir], None, started, error)
            return
        try:
            ended(by_dir[run_dir], read_json(run_dir / RESULT_FILE), started, None)
        except Exception as failure:  # keep going, as above
            ended(by_dir[run_dir], None, started, failure)

    run_side_by_side(list(by_dir), jobs, process_ended)


def run_cells(experiment: Experiment, runs: list[PlannedRun], runs_dir: Path, *, jobs: int = 1,
              on_finished: Callable[[PlannedRun, dict], None] | None = None) -> tuple[dict[str, dict], list[str]]:
    """Runs every distinct run of ``runs``; returns the results of the finished ones by identity and the failures (a
    failed run does not stop the others). ``jobs > 1`` runs them in subprocesses (logs in ``<run_dir>/run.log``; a
    runner that is stopped takes them down with it); ``jobs == 1`` runs them here, with progress bars.
    ``on_finished(run, result)`` is called as each run finishes (the experiment command writes its record then)."""
    unique = distinct(runs)
    check_prepared_dirs(unique)
    for run in unique:
        _write_cell_file(run, experiment)
    pending = [run for run in unique if not is_finished(run.run_dir)]
    _continue_capped_runs(pending, Path(runs_dir))
    print(f"[experiment] {len(unique)} runs, {len(unique) - len(pending)} already finished, {len(pending)} to run "
          f"({jobs} at a time) under {Path(runs_dir) / runs[0].scale if runs else runs_dir}", flush=True)
    _prepare_all(pending)
    failures = []

    def ended(run: PlannedRun, result: dict | None, started: float, error: Exception | None) -> None:
        what = f"{run.system.name} on {run.dataset.role}"
        if error is not None:
            failures.append(f"{what}: {error}")
            print(f"[experiment] FAILED {what}: {error}", flush=True)
            return
        print(f"[experiment] done {what}: BLEU {result['bleu']:.2f} in {(time.monotonic() - started) / 60:.1f} "
              f"min ({run.run_dir})", flush=True)
        if on_finished is not None:
            on_finished(run, result)

    if jobs <= 1:
        _run_here(pending, ended)
    else:
        _run_in_processes(pending, jobs, ended)
    results = {run.identity: {**read_json(run.run_dir / RESULT_FILE), "run_dir": str(run.run_dir)}
               for run in unique if is_finished(run.run_dir)}
    return results, failures


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m mma_nmt.experiments.runner <run_dir>", file=sys.stderr)
        return 2
    run_cell(args[0], progress=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
