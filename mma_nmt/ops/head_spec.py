"""Head specs of mixed multi-head attention (SPEC section 1): one letter per head kind, e.g. ``"GLFB"``."""

from __future__ import annotations

import functools
from enum import IntEnum
from typing import Sequence

import torch


class HeadKind(IntEnum):
    """Mask kind of one head. Values match ``csrc/attention/head_mask.h``."""

    GLOBAL = 0  # G: every key
    LOCAL = 1  # L: |i - j| <= window
    FORWARD = 2  # F: j >= i
    BACKWARD = 3  # B: j <= i
    CAUSAL = 4  # C: j <= i (decoder self-attention)


_LETTERS = {"G": HeadKind.GLOBAL, "L": HeadKind.LOCAL, "F": HeadKind.FORWARD, "B": HeadKind.BACKWARD, "C": HeadKind.CAUSAL}


def parse_head_spec(spec: str | Sequence[int], num_heads: int) -> list[int]:
    """Returns one :class:`HeadKind` value per head.

    ``spec`` is a string of the letters G, L, F, B, C or a sequence of kind values. A string shorter than ``num_heads``
    that divides it is stretched the paper's way, each letter repeated: ``"GLFB"`` with 8 heads is ``"GGLLFFBB"``.
    """
    # Every attention call parses its module's spec: the answers are kept (a few per model). Not while torch.compile
    # traces the call: Dynamo warns at every lru_cache it meets, and the parse becomes a constant of the graph anyway.
    # A refused spec (or one with unhashable entries) is parsed again as given, so that the error names it as given.
    if torch.compiler.is_compiling():
        return _parse_head_spec(spec, num_heads)
    key = spec if isinstance(spec, str) else tuple(spec) if isinstance(spec, Sequence) else None
    try:
        return list(_parse_head_spec_kept(key, num_heads))
    except (TypeError, ValueError):
        return _parse_head_spec(spec, num_heads)


def _parse_head_spec(spec: str | Sequence[int], num_heads: int) -> list[int]:
    if not isinstance(spec, (str, Sequence)):
        raise TypeError(f"head_kinds must be a string of the letters G, L, F, B, C or a sequence of HeadKind values, "
                        f"got {spec!r}")
    if isinstance(spec, str):
        unknown = sorted({c for c in spec.upper() if c not in _LETTERS})
        if not spec or unknown:
            raise ValueError(f"head_spec must be a non-empty string of the letters G, L, F, B, C; got {spec!r}")
        kinds = [int(_LETTERS[c]) for c in spec.upper()]
    else:
        try:
            kinds = [int(HeadKind(k)) for k in spec]
        except ValueError:
            raise ValueError(
                f"head_spec entries must be HeadKind values 0..{len(HeadKind) - 1}; got {list(spec)!r}"
            ) from None
        if not kinds and num_heads != 0:
            raise ValueError("head_spec must name at least one head kind")
    if len(kinds) == num_heads:
        return kinds
    if num_heads % len(kinds) == 0:
        repeat = num_heads // len(kinds)
        return [k for k in kinds for _ in range(repeat)]
    raise ValueError(
        f"head_spec {spec!r} has {len(kinds)} kinds, which neither equals nor divides num_heads={num_heads}"
    )


@functools.lru_cache(maxsize=256)
def _parse_head_spec_kept(spec: str | tuple, num_heads: int) -> tuple[int, ...]:
    return tuple(_parse_head_spec(spec, num_heads))


def format_head_spec(kinds: Sequence[int]) -> str:
    """Inverse of :func:`parse_head_spec` for a full list: ``[0, 1, 2, 3] -> "GLFB"``."""
    letters = {int(v): k for k, v in _LETTERS.items()}
    return "".join(letters[int(k)] for k in kinds)
