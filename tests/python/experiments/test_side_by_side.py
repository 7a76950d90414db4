"""Cells run side by side go down with their runner: stopped by an error, Ctrl-C or SIGTERM, the runner terminates
the cells it started and starts no queued one (before, a killed runner left its cells training unseen)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from mma_nmt.experiments.side_by_side import CellProcesses, run_side_by_side

# A stand-in for a cell: writes its pid into the run directory, then ends at once ("quick") or trains "forever".
FAKE_CELL = textwrap.dedent("""
    import os, sys, time
    run_dir = sys.argv[1]
    open(os.path.join(run_dir, "pid"), "w").write(str(os.getpid()))
    if not run_dir.endswith("quick"):
        time.sleep(600)
""")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def wait_for(condition, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def run_dirs(tmp_path: Path, *names: str) -> list[Path]:
    dirs = [tmp_path / name for name in names]
    for path in dirs:
        path.mkdir()
    return dirs


def kill_leftovers(*cells: Path) -> None:
    """Cleans up after a failed test: no stand-in cell may sleep on after it."""
    for cell in cells:
        if (cell / "pid").is_file() and alive(pid := int((cell / "pid").read_text())):
            os.kill(pid, signal.SIGKILL)


def test_an_error_in_the_runner_terminates_every_cell_it_started(tmp_path):
    quick, slow, queued = run_dirs(tmp_path, "quick", "slow", "queued")
    ended = []

    def on_end(run_dir, code, started, error):
        ended.append((run_dir.name, code, error))
        wait_for(lambda: (slow / "pid").is_file())
        raise ValueError("the runner failed while recording a result")

    try:
        with pytest.raises(ValueError, match="while recording"):
            run_side_by_side([quick, slow, queued], 2, on_end, CellProcesses([sys.executable, "-c", FAKE_CELL]))
        assert ended == [("quick", 0, None)]
        assert not alive(int((slow / "pid").read_text()))
        # the queued cell may have taken quick's slot before the error: then it was terminated too
        assert not (queued / "pid").exists() or not alive(int((queued / "pid").read_text()))
        assert (slow / "run.log").is_file()
    finally:
        kill_leftovers(slow, queued)


def test_exit_codes_and_output_of_cells_reach_the_runner(tmp_path):
    good, bad = run_dirs(tmp_path, "good", "bad")
    script = "import sys; print('training', sys.argv[1][-3:]); sys.exit(3 if sys.argv[1].endswith('bad') else 0)"
    ended = {}
    run_side_by_side([good, bad], 2, lambda run_dir, code, started, error: ended.update({run_dir.name: code}),
                     CellProcesses([sys.executable, "-c", script]))
    assert ended == {"good": 0, "bad": 3}
    assert (bad / "run.log").read_text() == "training bad\n"


# The runner in a process of its own. SIGINT gets Python's default handler (KeyboardInterrupt, as under Ctrl-C in a
# terminal): a process started in the background by a non-interactive shell inherits SIGINT ignored.
RUNNER = textwrap.dedent("""
    import signal, sys
    from pathlib import Path
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from mma_nmt.experiments.side_by_side import CellProcesses, run_side_by_side
    dirs = [Path(p) for p in sys.argv[2:]]
    run_side_by_side(dirs, 2, lambda *ended: None, CellProcesses([sys.executable, "-c", sys.argv[1]]))
""")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_killed_runner_takes_its_cells_down(tmp_path, signum):
    first, second, queued = run_dirs(tmp_path, "first", "second", "queued")
    runner = subprocess.Popen([sys.executable, "-c", RUNNER, FAKE_CELL, str(first), str(second), str(queued)],
                              stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: (first / "pid").is_file() and (second / "pid").is_file())
        runner.send_signal(signum)
        _, stderr = runner.communicate(timeout=60)
    finally:
        runner.kill()
        runner.wait()
        if runner.returncode == -signal.SIGKILL:
            kill_leftovers(first, second, queued)
    assert runner.returncode != 0
    assert "RunnerStopped" in stderr or "KeyboardInterrupt" in stderr, stderr[-2000:]
    for cell in (first, second):
        assert not alive(int((cell / "pid").read_text())), cell.name
    assert not (queued / "pid").exists()
