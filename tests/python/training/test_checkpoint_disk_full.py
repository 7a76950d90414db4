"""A full disk during a checkpoint save (issue 50, case 14): one clear line naming the directory instead of torch's
"[enforce fail at inline_container.cc] unexpected pos", no temporary file left behind, and a next run that resumes from
the complete checkpoints the failed save left (a ``best.pt`` without ``last.pt``) instead of refusing to start."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest
import torch

import mma_nmt.training.checkpoint as checkpoint
from mma_nmt.training.config import load_run_config
from mma_nmt.training.trainer import Trainer
from nmt_fixtures import tiny_data, tiny_overrides  # noqa: F401  (fixture)


class FullDisk:
    """A file handle on a disk that fills up after ``room`` bytes: the next write raises ``ENOSPC``."""

    def __init__(self, handle, room: int):
        self.handle, self.room = handle, room

    def write(self, data) -> int:
        if len(data) > self.room:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.room -= len(data)
        return self.handle.write(data)

    def __getattr__(self, name):
        return getattr(self.handle, name)


def fill_disk_when_writing(monkeypatch, name: str) -> None:
    """Checkpoint files called ``name`` fail with ENOSPC part-way through (the real atomic write runs around it)."""
    real = checkpoint.atomic_write_with

    def atomic_write_with(path, write):
        if Path(path).name != name:
            return real(path, write)
        return real(path, lambda handle: write(FullDisk(handle, room=4096)))

    monkeypatch.setattr(checkpoint, "atomic_write_with", atomic_write_with)


def _run(data, save_dir):
    return load_run_config(None, tiny_overrides(data, save_dir, "train.max_steps=4", "train.validate_every=2"))


def test_a_full_disk_during_a_save_names_the_directory_and_leaves_no_temporary(tiny_data, tmp_path,  # noqa: F811
                                                                               monkeypatch):
    save_dir = tmp_path / "run"
    fill_disk_when_writing(monkeypatch, "step_2.pt")  # best.pt of step 2 is written, then the disk is full
    with pytest.raises(OSError, match=rf"^no space left on {save_dir} \(writing step_2.pt"):
        Trainer(_run(tiny_data, save_dir)).train()
    assert sorted(p.name for p in save_dir.iterdir()) == [".lock", "best.pt", "log.jsonl"]  # no temporary left


def test_the_run_after_a_failed_first_save_resumes_from_best_pt(tiny_data, tmp_path, monkeypatch):  # noqa: F811
    """The failed save of step 2 left best.pt but no last.pt: the next run resumes from it (exactly: it ends as an
    uninterrupted run) instead of refusing to start until --overwrite deletes it."""
    save_dir = tmp_path / "run"
    fill_disk_when_writing(monkeypatch, "step_2.pt")
    with pytest.raises(Exception):
        Trainer(_run(tiny_data, save_dir)).train()
    monkeypatch.undo()

    Trainer(_run(tiny_data, save_dir)).train()  # space freed
    events = [json.loads(line) for line in (save_dir / "log.jsonl").open()]
    assert [(e["step"], e["path"]) for e in events if e["event"] == "resume"] == [(2, str(save_dir / "best.pt"))]
    straight = tmp_path / "straight"
    Trainer(_run(tiny_data, straight)).train()
    a = torch.load(straight / "last.pt", weights_only=True)
    b = torch.load(save_dir / "last.pt", weights_only=True)
    assert a["step"] == b["step"] == 4
    for name, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][name]), name
