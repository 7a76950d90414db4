"""Child process of ``test_train_kill.py``: trains a run and kills itself with SIGKILL at one chosen point.

``run(overrides, kill)`` in a fresh process (``test_train_kill.py`` forks it from a forkserver that has imported
torch and mma_nmt once), or ``python kill_child.py OVERRIDES_JSON KILL_JSON``, trains
``load_run_config(None, overrides)``; ``kill`` is ``None`` (train to the end) or one of

- ``{"save_step": n, "file": "best.pt" | "step.pt" | "last.pt", "point": p}``: during the checkpoint save of step
  ``n`` (``step.pt`` is ``step_<n>.pt``), at point ``p`` of that file's atomic write:
  ``"writing"`` half of the bytes are in the temporary file (flushed and fsynced, so they really are on disk),
  ``"written"`` the temporary file is complete and fsynced, not yet renamed,
  ``"renamed"`` just after ``os.replace`` put it under its final name (before the folder's fsync);
- ``{"save_step": n, "point": "pruned"}``: just after the save removed an old ``step_<k>.pt``;
- ``{"train_step": n, "phase": p}``: during the update that makes step ``n``, ``"forward"`` after the loss was
  computed, ``"backward"`` after the gradients were computed, ``"update"`` after the optimizer changed the weights
  (before the step is counted).

Everything is done by wrapping functions in this process only; the library has no test hooks.
"""

from __future__ import annotations

import io
import json
import os
import pathlib
import signal
import sys
import threading

import torch
import tqdm

import mma_nmt.training.checkpoint as checkpoint
import mma_nmt.training.trainer as trainer_module
from mma_nmt.training.config import load_run_config


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class Where:
    save_step: int | None = None  # the step whose checkpoints are being saved
    target: str | None = None  # final name of the checkpoint file being written
    train_step: int | None = None  # trainer.step at the start of the update in progress


def wrap(owner, name: str, make):
    setattr(owner, name, make(getattr(owner, name)))


def track_saves() -> None:
    def manager_save(original):
        def save(self, payload, step, **kwargs):
            Where.save_step = step
            try:
                return original(self, payload, step, **kwargs)
            finally:
                Where.save_step = None
        return save

    def save_checkpoint(original):
        def save(payload, path):
            Where.target = pathlib.Path(path).name
            try:
                return original(payload, path)
            finally:
                Where.target = None
        return save

    wrap(checkpoint.CheckpointManager, "save", manager_save)
    wrap(checkpoint, "save_checkpoint", save_checkpoint)


def kill_during_save(save_step: int, point: str, file: str | None = None) -> None:
    target = f"step_{save_step}.pt" if file == "step.pt" else file

    def here() -> bool:
        return Where.save_step == save_step and Where.target == target

    def torch_save(original):
        def save(obj, f, *args, **kwargs):
            if point != "writing" or not here():
                return original(obj, f, *args, **kwargs)
            buffer = io.BytesIO()
            original(obj, buffer, *args, **kwargs)
            data = buffer.getvalue()
            f.write(data[: len(data) // 2])
            f.flush()
            os.fsync(f.fileno())
            die()
        return save

    def replace(original):
        def replace_(src, dst, *args, **kwargs):
            hit = pathlib.Path(dst).name == target and here()
            if hit and point == "written":
                die()
            result = original(src, dst, *args, **kwargs)
            if hit and point == "renamed":
                die()
            return result
        return replace_

    def unlink(original):
        def unlink_(self, *args, **kwargs):
            result = original(self, *args, **kwargs)
            if point == "pruned" and Where.save_step == save_step and self.name.startswith("step_"):
                die()
            return result
        return unlink_

    wrap(torch, "save", torch_save)
    wrap(os, "replace", replace)
    wrap(pathlib.Path, "unlink", unlink)


def kill_during_step(train_step: int, phase: str) -> None:
    def here(wanted: str) -> bool:
        return phase == wanted and Where.train_step == train_step - 1

    def train_step_(original):
        def step(self, batch):
            Where.train_step = self.step
            return original(self, batch)
        return step

    def loss(original):
        def loss_(*args, **kwargs):
            result = original(*args, **kwargs)
            if here("forward"):
                die()
            return result
        return loss_

    def clip(original):
        def clip_(*args, **kwargs):
            if here("backward"):
                die()
            return original(*args, **kwargs)
        return clip_

    def schedule_step(original):
        def step(self, num_updates, *args, **kwargs):
            if here("update") and num_updates == train_step:  # the trainer counting the update just made
                die()
            return original(self, num_updates, *args, **kwargs)
        return step

    wrap(trainer_module.Trainer, "train_step", train_step_)
    wrap(trainer_module, "label_smoothed_cross_entropy", loss)
    wrap(torch.nn.utils, "clip_grad_norm_", clip)
    wrap(trainer_module.LRSchedule, "step", schedule_step)


def run(overrides: list[str], kill: dict | None) -> None:
    """Trains; with ``kill``, dies at that point. Call it in a fresh process (the wrappers stay installed)."""
    track_saves()
    if kill and "save_step" in kill:
        kill_during_save(kill["save_step"], kill["point"], kill.get("file"))
    elif kill:
        kill_during_step(kill["train_step"], kill["phase"])
    trainer_module.Trainer(load_run_config(None, overrides)).train()


def run_logged(overrides: list[str], kill: dict | None, output: str) -> None:
    """:func:`run` with stdout and stderr going to the file ``output``."""
    with open(output, "ab", buffering=0) as out:
        os.dup2(out.fileno(), 1)
        os.dup2(out.fileno(), 2)
    # tqdm's default lock is a multiprocessing semaphore, which a SIGKILL would leave to the resource tracker
    tqdm.tqdm.set_lock(threading.RLock())
    run(overrides, kill)


if __name__ == "__main__":
    run(json.loads(sys.argv[1]), json.loads(sys.argv[2]))
