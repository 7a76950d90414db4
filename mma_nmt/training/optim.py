"""Optimizers and learning-rate schedules: Adam with inverse-square-root warmup or a single cosine cycle with warmup
(Transformer papers), SGD halved on validation plateau and, as OpenNMT-py of 2018, at every epoch from a given one
(the multi-head Luong LSTM paper)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch

from mma_nmt.config_io import check_choices


@dataclass
class OptimConfig:
    optimizer: Literal["adam", "sgd"] = "adam"
    lr: float = 5e-4  # peak learning rate
    betas: tuple[float, float] = (0.9, 0.98)
    eps: float = 1e-8
    weight_decay: float = 0.0
    schedule: Literal["inverse_sqrt", "cosine", "plateau", "constant"] = "inverse_sqrt"
    warmup_steps: int = 4000  # every schedule warms up linearly from warmup_init_lr to lr first; 0 = start at lr
    warmup_init_lr: float = 1e-7
    min_lr: float = 0.0  # cosine floor
    total_steps: int = 0  # cosine cycle length; 0 = the run's max_steps
    plateau_factor: float = 0.5  # plateau: multiply the lr by this when validation perplexity does not improve
    # plateau, OpenNMT-py's -start_decay_at: from the validation that ends this epoch (1-based) on, every validation
    # multiplies the lr by plateau_factor, improved or not; 0 = off. Needs one validation per epoch.
    decay_start_epoch: int = 0
    # plateau, OpenNMT-py 2018's Optim.update_learning_rate: once a validation has cut the lr, every later one cuts it
    # too (the decay stays on); False = cut only at validations without a new best perplexity
    decay_stays_on: bool = False
    clip_norm: float = 0.0  # gradient clipping by global norm; 0 = off

    def __post_init__(self):
        check_choices("train.optim", self)
        if self.decay_start_epoch < 0:
            raise ValueError(f"optim.decay_start_epoch must be 0 (off) or positive, got {self.decay_start_epoch}")
        if (self.decay_start_epoch or self.decay_stays_on) and self.schedule != "plateau":
            raise ValueError("optim.decay_start_epoch and optim.decay_stays_on belong to the 'plateau' schedule, not "
                             f"{self.schedule!r}")


def build_optimizer(params, config: OptimConfig) -> torch.optim.Optimizer:
    if config.optimizer == "adam":
        return torch.optim.Adam(params, lr=config.lr, betas=tuple(config.betas), eps=config.eps,
                                weight_decay=config.weight_decay)
    if config.optimizer == "sgd":
        return torch.optim.SGD(params, lr=config.lr, weight_decay=config.weight_decay)
    raise ValueError(f"unknown optimizer {config.optimizer!r}; use 'adam' or 'sgd'")


def warmup_lr(step: int, config: OptimConfig) -> float:
    """Linear from ``warmup_init_lr`` to ``lr`` over ``warmup_steps``; every schedule starts with it."""
    return config.warmup_init_lr + (config.lr - config.warmup_init_lr) * step / max(1, config.warmup_steps)


def inverse_sqrt_lr(step: int, config: OptimConfig) -> float:
    """After the warmup: ``lr * sqrt(warmup / step)``."""
    return config.lr * math.sqrt(max(1, config.warmup_steps) / max(1, step))


def cosine_lr(step: int, config: OptimConfig, total_steps: int) -> float:
    """After the warmup: one half-cosine from ``lr`` down to ``min_lr`` at ``total_steps``."""
    span = max(1, total_steps - config.warmup_steps)
    progress = min(1.0, (step - config.warmup_steps) / span)
    return config.min_lr + 0.5 * (config.lr - config.min_lr) * (1.0 + math.cos(math.pi * progress))


class LRSchedule:
    """Sets the learning rate of every parameter group from the update count; ``plateau`` is driven by
    :meth:`on_validation`: the lr is multiplied by ``plateau_factor`` after a validation whose perplexity is no new
    best, after every validation from epoch ``decay_start_epoch`` on, and, with ``decay_stays_on``, after every
    validation once it was cut the first time."""

    def __init__(self, optimizer: torch.optim.Optimizer, config: OptimConfig, total_steps: int = 0):
        if config.schedule == "cosine" and not (config.total_steps or total_steps):
            raise ValueError("the cosine schedule needs optim.total_steps or train.max_steps")
        self.optimizer, self.config = optimizer, config
        self.total_steps = config.total_steps or total_steps
        self.num_updates, self.scale, self.best, self.decaying = 0, 1.0, math.inf, False
        self.step(0)

    def lr_at(self, step: int) -> float:
        """Warmup, then the schedule; ``scale`` holds the plateau cuts (1 for the other schedules)."""
        c = self.config
        if step < c.warmup_steps:
            return warmup_lr(step, c) * self.scale
        if c.schedule == "inverse_sqrt":
            return inverse_sqrt_lr(step, c)
        if c.schedule == "cosine":
            return cosine_lr(step, c, self.total_steps)
        return c.lr * self.scale  # constant (fairseq's "fixed" with --warmup-updates) and plateau

    def step(self, num_updates: int) -> float:
        self.num_updates = num_updates
        lr = self.lr_at(num_updates)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        return lr

    def on_validation(self, perplexity: float, epoch: int | None = None) -> None:
        """After a validation; ``epoch``: the epochs completed so far (needed by ``decay_start_epoch``)."""
        c = self.config
        improved = perplexity < self.best
        self.best = min(self.best, perplexity)
        if c.schedule != "plateau":
            return
        if c.decay_start_epoch and epoch is None:
            raise ValueError("optim.decay_start_epoch needs the epoch of each validation")
        reached = bool(c.decay_start_epoch) and epoch >= c.decay_start_epoch
        if improved and not reached and not self.decaying:
            return
        self.decaying = c.decay_stays_on or reached
        self.scale *= c.plateau_factor
        self.step(self.num_updates)

    def state_dict(self) -> dict:
        return {"num_updates": self.num_updates, "scale": self.scale, "best": self.best, "decaying": self.decaying}

    def load_state_dict(self, state: dict) -> None:
        self.scale, self.best = float(state["scale"]), float(state["best"])
        self.decaying = bool(state.get("decaying", False))  # absent from checkpoints written before the option
        self.step(int(state["num_updates"]))
