"""``train.loggers``: live views of a run beside its ``log.jsonl``, attached to the trainer as hooks.

A logger is a trainer hook (``logger(trainer)`` after every update) with a ``close(trainer)`` method that the trainer
calls once when training ends, after the last validation (also when it stops on an error or Ctrl-C)."""

from __future__ import annotations

from pathlib import Path

def build_loggers(names: list[str], save_dir: str | Path) -> tuple:
    """The hooks of ``train.loggers`` for a run saving to ``save_dir``; ImportError naming the extra to install when a
    logger's package is missing."""
    loggers = []
    for name in names:
        if name == "tensorboard":
            from mma_nmt.training.loggers.tensorboard import TensorBoardLogger

            loggers.append(TensorBoardLogger(Path(save_dir) / "tensorboard"))
        else:
            raise ValueError(f"train.loggers: unknown logger {name!r}")  # TrainConfig names the known ones
    return tuple(loggers)
