"""``mma-nmt experiment <paper> --status``: where every run of the chosen tables stands, read from the run records and
the runs directory, without training, recording or writing anything.

A run is, in this order of precedence:

- ``recorded``: its record is committed (stopping point and test sacreBLEU);
- ``finished``: its run directory holds ``result.json`` but no record was written yet (``--from-records`` writes it);
- ``training``: a process holds its run directory's lock now (its PID, progress and early-stopping state);
- ``trained``: its training ended (patience or cap) but it is not translated and scored yet: that is running now, or
  was interrupted and the next run of the table does it (the lock covers training only, so the two look alike);
- ``interrupted``: it has a log or checkpoints and nobody trains it (the next run of the table resumes it);
- ``continues``: it has not started, and a finished run of the same config with a lower cap will be continued;
- ``not started``.

For every run that is not recorded it prints the command that trains just that run, so the rest of a table can be
spread over machines or queued.
"""

from __future__ import annotations

import shlex
import time
from dataclasses import dataclass
from pathlib import Path

from mma_nmt.experiments.records import CONTINUE_EVENT, log_events, training_segments
from mma_nmt.experiments.runner import capped_predecessor, holds_run, is_finished
from mma_nmt.experiments.spec import PlannedRun, distinct
from mma_nmt.training.run_lock import lock_holder

STATES = ("recorded", "finished", "training", "trained", "interrupted", "continues", "not started")


@dataclass
class RunStatus:
    run: PlannedRun  # under the first of the chosen tables that has it
    state: str  # one of STATES
    detail: str


def _count(value) -> str:
    """An update count with thousands separators, or "?" where a record or log lacks it."""
    return f"{value:,}" if isinstance(value, int) else "?"


def _of(events: list[dict], kind: str) -> list[dict]:
    return [event for event in events if event["event"] == kind]


def _progress(run: PlannedRun, events: list[dict]) -> str:
    """How far a run that has started has come, from its log's events: the last update logged, the last validation,
    and the early-stopping state (validations in a row without a new best, of the patience)."""
    train = run.run_config.train
    stepped = [event for event in events if event["event"] in ("train", "valid", "end")]
    if not stepped:
        return f"no update logged yet (max {train.max_steps:,})"
    text = f"update {stepped[-1]['step']:,} of {train.max_steps:,}"
    valids = _of(events, "valid")
    if valids:
        valid = valids[-1]
        text += f"; validation at {valid['step']:,}: nll {valid['valid_nll']:.3f}"
        if valid.get("best"):
            text += " (best)"
        if train.patience:
            text += f", {valid.get('stale_validations', 0)} of {train.patience} without a new best"
    return text + f"; last logged {(time.time() - events[-1]['time']) / 60.0:.0f} min ago"


def _resume_point(events: list[dict]) -> str:
    """Where the next run resumes: the update of the last ``last.pt`` the log names (what a kill after it redoes)."""
    saved = [event for event in _of(events, "checkpoint") if Path(event.get("path", "")).name == "last.pt"]
    return f"; last checkpoint at {saved[-1]['step']:,} (resumes there)" if saved else "; no last.pt logged"


def _training_ended(events: list[dict]) -> dict | None:
    """The ``end`` event of the log's last training segment when that segment ended and no continuation of a capped
    run (:func:`~mma_nmt.experiments.runner.continue_from`, which copies the capped run's log, ``end`` included)
    followed it; else None."""
    segments = training_segments(events)
    if not segments or not segments[-1]["ended"]:
        return None
    kinds = [event["event"] for event in events]
    last_end = len(kinds) - 1 - kinds[::-1].index("end")
    return None if CONTINUE_EVENT in kinds[last_end:] else events[last_end]


def _started_run_status(run: PlannedRun) -> RunStatus:
    """A run directory that holds a run but no result: training now, trained but not scored, or interrupted."""
    log = run.run_dir / "log.jsonl"
    events = log_events(log) if log.is_file() else []
    holder = lock_holder(run.run_dir)
    if holder is not None:
        return RunStatus(run, "training", f"PID {holder}: " + _progress(run, events))
    end = _training_ended(events)
    if end is not None:  # the lock covers training only: decoding now and killed while decoding look alike
        detail = (f"training stopped at {_count(end.get('step'))} ({end.get('stopped', 'max_steps')}; best "
                  f"{_count(end.get('best_step', end.get('step')))}); translation and scoring not finished (running "
                  f"now, or the table's next run does them)")
        return RunStatus(run, "trained", detail)
    if not events:
        return RunStatus(run, "interrupted", "checkpoints but no log.jsonl")
    return RunStatus(run, "interrupted", _progress(run, events) + _resume_point(events))


def run_status(run: PlannedRun, runs_dir: Path, records: dict[str, dict]) -> RunStatus:
    """The state of ``run`` (see the module docstring)."""
    record = records.get(run.identity)
    if record is not None:
        stop, metrics = record.get("stopping", {}), record.get("metrics", {})
        detail = (f"stopped at {_count(stop.get('updates'))} ({stop.get('reason')}; best "
                  f"{_count(stop.get('best_update'))}), sacreBLEU {metrics.get('bleu', float('nan')):.2f}")
        return RunStatus(run, "recorded", detail)
    if is_finished(run.run_dir):
        return RunStatus(run, "finished", "no record yet: --from-records writes it")
    if holds_run(run.run_dir):
        return _started_run_status(run)
    predecessor = capped_predecessor(run, runs_dir)
    if predecessor is not None:
        return RunStatus(run, "continues", f"will continue the finished capped run {predecessor}")
    return RunStatus(run, "not started", "")


def table_status(runs: list[PlannedRun], runs_dir: Path, records: dict[str, dict]) -> list[RunStatus]:
    """Every distinct run of ``runs`` (the chosen tables' runs in reading order), each once, under the first table
    that has it."""
    return [run_status(run, Path(runs_dir), records) for run in distinct(runs)]


def train_command(paper: str, status: RunStatus) -> str:
    """The command that trains just this run (and rebuilds its table)."""
    run = status.run
    return " ".join(shlex.quote(str(part)) for part in (
        "mma-nmt", "experiment", paper, "--table", run.table, "--scale", run.scale, "--dataset", run.dataset.role,
        "--system", run.system.name, "--seed", run.seed, "--jobs", 1))


def format_status(paper: str, statuses: list[RunStatus]) -> str:
    """One line per run, a count per state, and the commands that train the runs without a record."""
    def width(of) -> int:
        return max((len(of(s.run)) for s in statuses), default=0)

    table, system, dataset = width(lambda r: r.table), width(lambda r: r.system.name), width(lambda r: r.dataset.role)
    lines = [f"{s.run.table:<{table}}  {s.run.system.name:<{system}}  {s.run.dataset.role:<{dataset}}  seed "
             f"{s.run.seed}  {s.state:<11} {s.detail}".rstrip() for s in statuses]
    counts = {state: sum(1 for s in statuses if s.state == state) for state in STATES}
    lines.append(f"{len(statuses)} runs: " + ", ".join(f"{n} {state}" for state, n in counts.items() if n))
    missing = [s for s in statuses if s.state not in ("recorded", "finished", "training")]
    if missing:
        lines.append("to train the runs without a record, one command each (any order, any machine):")
        lines.extend("  " + train_command(paper, s) for s in missing)
    return "\n".join(lines)
