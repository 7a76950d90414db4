"""Runs cells side by side, each in its own process, and takes those processes down with the runner: a runner stopped
by Ctrl-C or ``kill`` (SIGTERM) terminates the cells it started instead of leaving them training unseen (each resumes
from its last checkpoint when the table is run again)."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

CELL_COMMAND = [sys.executable, "-m", "mma_nmt.experiments.runner"]  # + the run directory
TERMINATE_GRACE_S = 30.0


class RunnerStopped(BaseException):
    """Raised in the runner's main thread by SIGTERM, so that it stops its cells before it exits; like
    KeyboardInterrupt it is no ``Exception``, so that no handler that keeps going after a failed run swallows it."""


class CellProcesses:
    """The cell processes alive now; ``stop()`` terminates them (then kills those that outlive the grace period) and
    refuses to start new ones."""

    def __init__(self, command: list[str] | None = None):
        self.command = list(command or CELL_COMMAND)
        self._lock = threading.Lock()
        self._alive: set[subprocess.Popen] = set()
        self._stopped = False

    def run(self, run_dir: Path) -> tuple[int, float]:
        """Runs one cell to its end (output appended to ``<run_dir>/run.log``); returns its exit code and the time
        it started (a pool may start it long after it was submitted)."""
        started = time.monotonic()
        with (Path(run_dir) / "run.log").open("a", encoding="utf-8") as log:
            with self._lock:
                if self._stopped:
                    raise RunnerStopped(f"not started: the runner is stopping ({run_dir})")
                process = subprocess.Popen([*self.command, str(run_dir)], stdout=log, stderr=subprocess.STDOUT)
                self._alive.add(process)
            try:
                return process.wait(), started
            finally:
                with self._lock:
                    self._alive.discard(process)

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            alive = list(self._alive)
        for process in alive:
            process.terminate()
        deadline = time.monotonic() + TERMINATE_GRACE_S
        for process in alive:
            try:
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _raise_stopped(signum, frame):
    raise RunnerStopped(f"stopped by signal {signum}")


def run_side_by_side(run_dirs: list[Path], jobs: int,
                     on_end: Callable[[Path, int | None, float, Exception | None], None],
                     processes: CellProcesses | None = None) -> None:
    """Runs the cells of ``run_dirs``, ``jobs`` at a time, and calls ``on_end(run_dir, exit code, start time,
    error)`` as each ends. If the runner is interrupted (Ctrl-C, SIGTERM, or an exception from ``on_end``), the
    running cells are terminated and the queued ones never start."""
    processes = processes or CellProcesses()
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _raise_stopped) if in_main_thread else None
    pool = ThreadPoolExecutor(max_workers=jobs)
    try:
        futures = {pool.submit(processes.run, run_dir): run_dir for run_dir in run_dirs}
        for future in as_completed(futures):
            try:
                code, started = future.result()
            except Exception as error:
                on_end(futures[future], None, time.monotonic(), error)
            else:
                on_end(futures[future], code, started, None)
    except BaseException:
        processes.stop()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        if in_main_thread:
            signal.signal(signal.SIGTERM, previous)
