"""Length penalties of beam search as small named functions: a finished hypothesis of ``length`` target tokens
(EOS included) and summed log-probability ``score`` is ranked by ``score / penalty(length, alpha)``."""

from __future__ import annotations

from typing import Callable, Literal


def no_penalty(length: int, alpha: float) -> float:
    """Raw log-probability (favours short outputs)."""
    return 1.0


def exponent_penalty(length: int, alpha: float) -> float:
    """fairseq's ``lenpen``: divide by ``length ** alpha`` (alpha = 1 is the average, 0 is no penalty)."""
    return float(length) ** alpha


def average_penalty(length: int, alpha: float) -> float:
    """OpenNMT's "avg": the average log-probability per token (alpha is ignored)."""
    return float(length)


def gnmt_penalty(length: int, alpha: float) -> float:
    """GNMT (Wu et al. 2016): ``((5 + length) / 6) ** alpha``."""
    return ((5.0 + length) / 6.0) ** alpha


LengthPenalty = Literal["none", "fairseq", "avg", "wu"]  # the keys of LENGTH_PENALTIES
LENGTH_PENALTIES: dict[LengthPenalty, Callable[[int, float], float]] = {
    "none": no_penalty,
    "fairseq": exponent_penalty,
    "avg": average_penalty,
    "wu": gnmt_penalty,
}


def length_penalty(name: LengthPenalty) -> Callable[[int, float], float]:
    if name not in LENGTH_PENALTIES:
        raise ValueError(f"unknown length penalty {name!r}; known: {sorted(LENGTH_PENALTIES)}")
    return LENGTH_PENALTIES[name]


def max_lengths(src_lengths, a: float, b: int, cap: int | None = None) -> list[int]:
    """Maximum output length per sentence, ``floor(a * src_len + b)`` (EOS included), at least 1, at most ``cap``."""
    limits = [max(1, int(a * int(n) + b)) for n in src_lengths]
    return [min(n, cap) for n in limits] if cap is not None else limits
