"""Ctrl-C during ``mma-nmt train`` (issue 50, case 16): one line saying at which step the run stopped, which checkpoint
holds what, and the command that resumes it; exit status 130, as a shell reports SIGINT. No 40-line traceback."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest
import torch

from mma_nmt.training.checkpoint import save_checkpoint
from nmt_fixtures import tiny_data, tiny_overrides  # noqa: F401  (fixture)


def _default_sigint() -> None:
    # a process started in the background by a non-interactive shell inherits SIGINT ignored; a terminal's has it
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _saved(log) -> bool:
    return log.is_file() and any(json.loads(line)["event"] == "checkpoint" for line in log.open())


def test_ctrl_c_prints_one_line_with_the_last_checkpoint_and_the_resume_command(tiny_data, tmp_path):  # noqa: F811
    save_dir = tmp_path / "run"
    overrides = tiny_overrides(tiny_data, save_dir, "train.max_steps=100000", "train.save_every=3")
    command = [sys.executable, "-m", "mma_nmt", "train", "--overwrite"] + [a for o in overrides for a in ("--set", o)]
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             preexec_fn=_default_sigint)
    try:
        deadline = time.monotonic() + 300
        while not _saved(save_dir / "log.jsonl"):
            assert child.poll() is None and time.monotonic() < deadline, child.communicate()
            time.sleep(0.2)
        child.send_signal(signal.SIGINT)
        _, err = child.communicate(timeout=120)
    finally:
        child.kill()
        child.wait()
    assert child.returncode == 130, err
    assert err.count("\n") == 1, err
    saved = torch.load(save_dir / "last.pt", weights_only=True)["step"]
    assert err.startswith("mma-nmt: training stopped at step ") and \
        f"the last checkpoint, {save_dir / 'last.pt'}, holds step {saved}; " in err, err
    resume = err.split("to resume, run: ", 1)[1].strip()
    assert resume.startswith("mma-nmt train --set ") and "train.max_steps=100000" in resume, err
    assert "--overwrite" not in resume and "train.resume" not in resume, err  # the same command would start over


class Interrupted:
    """A file handle that gets a Ctrl-C once some of the file is written."""

    def __init__(self, handle):
        self.handle, self.room = handle, 4096

    def write(self, data):
        if len(data) > self.room:
            raise KeyboardInterrupt
        self.room -= len(data)
        return self.handle.write(data)

    def __getattr__(self, name):
        return getattr(self.handle, name)


def test_ctrl_c_during_a_checkpoint_write_stays_a_keyboard_interrupt(tmp_path, monkeypatch):
    """torch's archive writer turns an exception of the file's write into "[enforce fail at inline_container.cc]
    unexpected pos" (a RuntimeError): a Ctrl-C during a save must still be a Ctrl-C (and leave no temporary file)."""
    import mma_nmt.training.checkpoint as checkpoint

    real = checkpoint.atomic_write_with
    monkeypatch.setattr(checkpoint, "atomic_write_with",
                        lambda path, write: real(path, lambda handle: write(Interrupted(handle))))
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint({"model": {"w": torch.zeros(1000)}, "step": 1}, tmp_path / "last.pt")
    assert list(tmp_path.iterdir()) == []
