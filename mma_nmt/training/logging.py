"""Training logs as JSON lines (one object per event, with a wall-clock timestamp)."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path


def _plain(value):
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


class JsonLinesLogger:
    """Appends ``{"event": ..., "time": ..., **fields}`` lines to ``path`` (only when ``enabled``)."""

    def __init__(self, path: str | Path, enabled: bool = True):
        self.path = Path(path)
        self.enabled = enabled
        if enabled:
            self.path.parent.mkdir(parents=True, exist_ok=True)

    def log(self, event: str, **fields) -> dict:
        record = {"event": event, "time": round(time.time(), 3), **{k: _plain(v) for k, v in fields.items()}}
        if self.enabled:
            with self.path.open("a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")
        return record
