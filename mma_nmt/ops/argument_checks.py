"""Checks of Python arguments before they reach the dispatcher, whose own errors name its internals (``Expected a value
of type 'int' ... but instead found type 'int'``, ``'list' object has no attribute 'is_meta'``) instead of what was
expected."""

from __future__ import annotations

import torch

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def check_int64(op: str, **values: int) -> None:
    """Raises ``ValueError`` naming the first of ``values`` outside the int64 range the schema's ``int`` holds."""
    for name, value in values.items():
        if isinstance(value, int) and not INT64_MIN <= value <= INT64_MAX:
            raise ValueError(f"{op}: {name} must be a 64-bit integer in [-2**63, 2**63 - 1], got {value}")


def check_optional_tensor(op: str, name: str, value, expected: str) -> None:
    """Raises ``TypeError`` when ``value`` is neither None nor a tensor (e.g. a Python list of lengths)."""
    if value is not None and not isinstance(value, torch.Tensor):
        raise TypeError(f"{op}: {name} must be {expected} or None, got {type(value).__name__}")
