"""Which validation is the best so far, and when to stop: ``train.best_metric`` and ``train.patience``.

The tracker keeps the best score in "lower is better" form (validation NLL as it is, BLEU negated), so checkpoints
written before ``best_metric`` existed (their ``best`` is a validation NLL) load unchanged.
"""

from __future__ import annotations

import math
import typing
from dataclasses import dataclass
from typing import Literal

BestMetric = Literal["nll", "bleu"]
BEST_METRICS = typing.get_args(BestMetric)


def metric_key(best_metric: str) -> str:
    """The key of a validation result that ``best_metric`` reads."""
    if best_metric not in BEST_METRICS:
        raise ValueError(f"train.best_metric must be one of {BEST_METRICS}, got {best_metric!r}")
    return "valid_nll" if best_metric == "nll" else "valid_bleu"


@dataclass
class EarlyStopping:
    """``update(result, step)`` after every validation; ``should_stop`` once ``patience`` validations in a row did not
    improve on the best (``patience = 0``: never)."""

    best_metric: BestMetric = "nll"
    patience: int = 0
    best: float = math.inf  # lower is better: NLL, or -BLEU
    best_step: int = -1
    stale: int = 0  # validations since the last improvement

    def __post_init__(self):
        metric_key(self.best_metric)
        if self.patience < 0:
            raise ValueError(f"train.patience must be 0 (off) or positive, got {self.patience}")

    def update(self, result: dict, step: int) -> bool:
        """Records a validation; returns whether it is the best so far (a NaN score never is)."""
        key = metric_key(self.best_metric)
        if key not in result:
            raise ValueError(f"train.best_metric={self.best_metric!r} needs {key} in the validation result; "
                             f"set train.bleu_sentences > 0 to validate BLEU")
        score = float(result[key]) if self.best_metric == "nll" else -float(result[key])
        if score < self.best:  # False for NaN
            self.best, self.best_step, self.stale = score, step, 0
            return True
        self.stale += 1
        return False

    @property
    def should_stop(self) -> bool:
        return self.patience > 0 and self.stale >= self.patience

    def state_dict(self) -> dict:
        return {"best": self.best, "best_step": self.best_step, "stale_validations": self.stale}

    def load_state_dict(self, state: dict) -> None:
        """Accepts checkpoints written before early stopping existed (only ``best``)."""
        self.best = float(state["best"])
        self.best_step = int(state.get("best_step", -1))
        self.stale = int(state.get("stale_validations", 0))
