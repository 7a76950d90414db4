"""One training run per run directory: an exclusive lock on ``save_dir/.lock``, and no silent restart over old results.

Two runs writing one directory corrupt each other (one run's cleanup of stale temporary files removes the other's file
mid-save; the checkpoints end up from two seeds), and a run started afresh (``train.resume = false``) over a directory
with checkpoints would replace a trained ``best.pt`` by an untrained one. The lock is an ``fcntl.flock`` on an open
file: the operating system drops it when the holder exits, however it exits (SIGKILL included), so no stale lock ever
needs removing by hand; the holder's PID is written in the file for the error message.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

LOCK_NAME = ".lock"
CHECKPOINT_PATTERNS = ("last.pt", "best.pt", "step_*.pt")  # see CheckpointManager


class RunDirectoryBusy(RuntimeError):
    """Another process holds the run directory's lock."""


class RunDirectoryLock:
    """``with RunDirectoryLock(save_dir): ...`` holds ``save_dir/.lock`` exclusively, or raises
    :class:`RunDirectoryBusy` at once (no waiting) naming the directory and the holder's PID."""

    def __init__(self, directory: str | Path):
        self.path = Path(directory) / LOCK_NAME
        self._handle = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(self.path, "a+", encoding="utf-8")
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "unknown"
            handle.close()
            raise RunDirectoryBusy(f"{self.path.parent} is in use by another training run (PID {holder}); wait for "
                                   f"it to finish or choose another train.save_dir") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        self._handle = handle

    def release(self) -> None:
        if self._handle is not None:
            self._handle.close()  # closing the file drops the lock; the file stays (removing it would race)
            self._handle = None

    def __enter__(self) -> "RunDirectoryLock":
        self.acquire()
        return self

    def __exit__(self, *exc_info) -> None:
        self.release()


def lock_holder(directory: str | Path) -> int | None:
    """The PID of the process that holds ``directory``'s lock now, or None; takes no lock itself (even a moment's
    probe would make a run starting then fail as busy). The PID file outlives its process and PIDs are reused, so on
    Linux the holder must also appear in ``/proc/locks`` with a flock on this very file (its inode); where that table
    cannot be read, a live process with the PID counts."""
    path = Path(directory) / LOCK_NAME
    try:
        pid, inode = int(path.read_text(encoding="utf-8").split()[0]), path.stat().st_ino
    except (OSError, ValueError, IndexError):
        return None
    try:
        table = Path("/proc/locks").read_text(encoding="utf-8")
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:  # alive, another user's
            pass
        return pid
    for line in table.splitlines():
        fields = line.split()  # "2: FLOCK  ADVISORY  WRITE 24666 fe:00:5686982 0 EOF" (waiters have "->" as [1])
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[4] == str(pid) and \
                fields[5].rsplit(":", 1)[-1] == str(inode):
            return pid
    return None


def existing_checkpoints(directory: str | Path) -> list[Path]:
    """The checkpoint files of a run directory (``last.pt``, ``best.pt``, ``step_<n>.pt``), sorted."""
    directory = Path(directory)
    return sorted(p for pattern in CHECKPOINT_PATTERNS for p in directory.glob(pattern))


def claim_for_fresh_start(directory: str | Path, *, overwrite: bool) -> list[Path]:
    """For a run that does not resume: refuses a directory that holds checkpoints (``ValueError`` naming it and the
    ways out), or with ``overwrite`` deletes them and returns what was deleted. Call it while holding the lock."""
    found = existing_checkpoints(directory)
    if found and not overwrite:
        names = ", ".join(p.name for p in found[:5])
        raise ValueError(f"{directory} already holds checkpoints ({names}) and this run starts afresh (train.resume is "
                         f"false): it would overwrite them. Resume it (train.resume=true), choose a new "
                         f"train.save_dir, or delete them with --overwrite (train.overwrite=true)")
    for path in found:
        path.unlink()
    return found
