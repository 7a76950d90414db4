"""Side-by-side timing helpers for the benchmark scripts: every figure a script reports is a ratio of two timings taken in
the same run, interleaved, so that drift on a shared machine hits both sides alike."""

from __future__ import annotations

import statistics
import time
from typing import Callable, Sequence

import torch


def _no_wait() -> None:
    pass


def time_interleaved(fns: Sequence[Callable[[], object]], *, repeat: int = 7, warmup: int = 2,
                     min_seconds: float = 0.05, synchronize: Callable[[], None] = _no_wait) -> list[float]:
    """Median seconds per call of each function, measured in interleaved rounds (a, b, c, a, b, c, ...).

    Each round runs a function enough times to last about ``min_seconds`` (calibrated during warm-up).
    ``synchronize`` waits for queued work (``torch.cuda.synchronize`` for GPU calls, which return before the kernels
    finish); it runs before each clock start and stop.
    """
    loops = []
    for fn in fns:
        for _ in range(warmup):
            fn()
        synchronize()
        start = time.perf_counter()
        fn()
        synchronize()
        once = max(time.perf_counter() - start, 1e-6)
        loops.append(max(1, int(min_seconds / once)))
    samples: list[list[float]] = [[] for _ in fns]
    for _ in range(repeat):
        for index, fn in enumerate(fns):
            synchronize()
            start = time.perf_counter()
            for _ in range(loops[index]):
                fn()
            synchronize()
            samples[index].append((time.perf_counter() - start) / loops[index])
    return [statistics.median(s) for s in samples]


def timed_call(fn: Callable[[], object], backward: bool, leaves: Sequence) -> Callable[[], None]:
    """One call of ``fn``: without ``backward`` under ``torch.no_grad`` (inference); with ``backward``, also the
    gradients of ``leaves``, dropped again so that no call pays for accumulating into the previous call's ``.grad``.
    ``fn`` returns a tensor or a tuple of tensors.

    The backward pass starts from fixed random output gradients (drawn at the first call), as a real loss gives: the
    gradient of ``out.sum()`` would be an expanded stride-0 tensor, which some kernels must first copy and others
    can exploit, and neither happens in training."""
    grads: list[torch.Tensor] = []

    def call() -> None:
        if not backward:
            with torch.no_grad():
                fn()
            return
        out = fn()
        outs = [o for o in (out if isinstance(out, tuple) else (out,)) if o.requires_grad]
        if not grads:
            grads.extend(torch.randn_like(o) for o in outs)
        torch.autograd.backward(outs, grads)
        for leaf in leaves:
            leaf.grad = None

    return call


def speedup_rows(label: str, pairs: dict, leaves: Sequence, *, repeat: int, passes: Sequence[bool] = (False, True),
                 **timing) -> list[list[object]]:
    """For each ``what -> (fused, other)`` pair, forward and forward+backward rows (``passes``: with backward or not)
    of ``[label, what, pass, other ms, fused ms, other / fused]``, timed side by side. ``timing``: more keyword
    arguments of :func:`time_interleaved`."""
    rows: list[list[object]] = []
    for what, (fast, slow) in pairs.items():
        for backward in passes:
            t_fast, t_slow = time_interleaved([timed_call(fast, backward, leaves), timed_call(slow, backward, leaves)],
                                              repeat=repeat, **timing)
            rows.append([label, what, "fwd+bwd" if backward else "fwd", t_slow * 1e3, t_fast * 1e3, t_slow / t_fast])
    return rows


def pass_name(backward: bool) -> str:
    return "fwd+bwd" if backward else "fwd"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    def cell(value: object) -> str:
        return f"{value:.2f}" if isinstance(value, float) else str(value)

    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)
