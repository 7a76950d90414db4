"""Values the operators' Python functions give the arguments left as None: the logit scale and the dropout seed."""

from __future__ import annotations

import math

import torch


def default_scale(head_dim: int) -> float:
    """``1/sqrt(head_dim)``, the logit scale of scaled dot-product attention; 1.0 for a head size of 0 (or unknown,
    when the operator is about to name a tensor of the wrong rank)."""
    return 1.0 / math.sqrt(head_dim) if head_dim > 0 else 1.0


def draw_dropout_seed(dropout_p: float) -> int:
    """A dropout seed from torch's default generator when dropout is on (``dropout_p > 0``), else 0 (no draw, so the
    generator's state does not depend on whether dropout is off)."""
    return int(torch.randint(0, 2**62, (1,)).item()) if dropout_p > 0 else 0
