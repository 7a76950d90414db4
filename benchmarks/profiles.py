"""The suite's three sizes: ``full`` (the report, under 10 minutes on 2 cores), ``quick`` (about a minute) and
``tiny`` (seconds: the smoke test of the report's structure; its numbers mean nothing)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

PROFILES = ("full", "quick", "tiny")


@dataclass(frozen=True)
class Timing:
    """Keyword arguments of ``timing.time_interleaved``."""

    repeat: int
    warmup: int
    min_seconds: float

    def kwargs(self) -> dict:
        return asdict(self)


TIMING = {"full": Timing(repeat=5, warmup=1, min_seconds=0.05), "quick": Timing(repeat=3, warmup=1, min_seconds=0.0),
          "tiny": Timing(repeat=1, warmup=0, min_seconds=0.0)}


def check_profile(profile: str) -> str:
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {PROFILES}, got {profile!r}")
    return profile
