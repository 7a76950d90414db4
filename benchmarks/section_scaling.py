"""Section "scaling": time of the fused operator against length for global and local heads (all lengths of one kind
and pass interleaved in the same rounds), and peak memory of one forward+backward against length for the fused
operator, SDPA with a boolean mask and the reference (in fresh processes, see ``memory``)."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import torch

from benchmarks.bench_attention import make_case, runners
from benchmarks.machine import last_level_cache_bytes
from benchmarks.memory import peak_growth_mib, run_child
from benchmarks.profiles import TIMING
from benchmarks.report import Section, Table
from benchmarks.timing import pass_name, time_interleaved

HEAD_DIM, WINDOW = 64, 1


@dataclass(frozen=True)
class Sizes:
    batch: int
    heads: int
    lengths: tuple
    memory_lengths: tuple
    memory_in_process: bool = False  # tiny sizes only: spares the smoke test a process start per contender


SIZES = {
    "full": Sizes(batch=8, heads=4, lengths=(64, 128, 256, 512, 1024), memory_lengths=(128, 256, 512, 1024)),
    "quick": Sizes(batch=8, heads=4, lengths=(128, 256, 512, 1024), memory_lengths=(256, 1024)),
    "tiny": Sizes(batch=2, heads=4, lengths=(8, 16, 32), memory_lengths=(8, 16), memory_in_process=True),
}
MEMORY_CONTENDERS = (("fused", "local"), ("fused", "global"), ("sdpa", "local"), ("reference", "local"))


def log_slope(lengths, seconds) -> float:
    """Least-squares slope of log(time) against log(length): 1 = linear, 2 = quadratic."""
    xs, ys = [math.log(n) for n in lengths], [math.log(s) for s in seconds]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def case_copies(sizes: Sizes, length: int, backward: bool) -> int:
    """How many independent input sets a "cold" timing cycles through: enough that together they span twice the
    last-level cache, so every call reads its inputs from memory whatever the length."""
    tensors = 8 if backward else 4  # q, k, v, out (+ grad_out and the three input gradients)
    case_bytes = tensors * sizes.batch * sizes.heads * length * HEAD_DIM * 4
    return max(2, math.ceil(2 * last_level_cache_bytes() / case_bytes))


def hot_and_cold_calls(sizes: Sizes, length: int, spec: str, backward: bool) -> tuple:
    """(hot, cold): ``hot`` runs the fused operator on the same inputs every time (they stay in cache when small
    enough); ``cold`` takes the next of ``case_copies`` input sets in turn (they never do)."""
    calls = [runners(make_case(sizes.batch, sizes.heads, length, HEAD_DIM, spec, WINDOW, backward), WINDOW, backward,
                     ("fused",))[0] for _ in range(case_copies(sizes, length, backward))]
    turn = itertools.cycle(calls)
    return calls[0], lambda: next(turn)()


def time_rows(sizes: Sizes, spec: str, backward: bool, timing: dict) -> tuple[list[list], float, float]:
    """Rows [kind, pass, T, hot ms, hot µs per query position, cold ms, cold µs per query position, cold µs per query
    relative to that at the shortest length], and the log-log slopes (hot, cold) over the upper half of the lengths
    (where fixed per-call costs no longer dominate)."""
    calls = [call for length in sizes.lengths for call in hot_and_cold_calls(sizes, length, spec, backward)]
    with torch.set_grad_enabled(backward):
        seconds = time_interleaved(calls, **timing)
    hot, cold = seconds[0::2], seconds[1::2]
    cold_per_query = [s / n for s, n in zip(cold, sizes.lengths)]
    rows = [[spec, pass_name(backward), n, h * 1e3, h / n * 1e6, c * 1e3, p * 1e6, p / cold_per_query[0]]
            for n, h, c, p in zip(sizes.lengths, hot, cold, cold_per_query)]
    upper = len(sizes.lengths) // 2
    longer = sizes.lengths[upper:]
    return rows, log_slope(longer, hot[upper:]), log_slope(longer, cold[upper:])


def memory_child(contender: str, spec: str, batch: int, heads: int, lengths: list) -> list:
    """Runs in a fresh process: peak memory growth (MiB) of one forward+backward at each length in turn."""
    warm = make_case(1, heads, 4, HEAD_DIM, spec, WINDOW, True)
    runners(warm, WINDOW, True, (contender,))[0]()  # lazy initialisation (autograd engine, thread pools)
    peaks = []
    for length in lengths:
        case = make_case(batch, heads, length, HEAD_DIM, spec, WINDOW, True)
        call = runners(case, WINDOW, True, (contender,))[0]
        peaks.append(peak_growth_mib(call))
        del case, call
    return peaks


def memory_rows(sizes: Sizes) -> list[list]:
    args = (sizes.batch, sizes.heads, list(sizes.memory_lengths))
    if sizes.memory_in_process:
        peaks = {c: memory_child(*c, *args) for c in MEMORY_CONTENDERS}
    else:
        peaks = {c: run_child("benchmarks.section_scaling:memory_child", *c, *args, threads=torch.get_num_threads())
                 for c in MEMORY_CONTENDERS}
    rows = []
    for i, length in enumerate(sizes.memory_lengths):
        one_bhts = sizes.batch * sizes.heads * length * length * 4 / 2 ** 20
        rows.append([length] + [peaks[c][i] for c in MEMORY_CONTENDERS] + [one_bhts])
    return rows


def run(profile: str) -> Section:
    sizes, timing = SIZES[profile], TIMING[profile].kwargs()
    section = Section("scaling", "d. Scaling with length", (
        f"Fused operator, batch {sizes.batch}, {sizes.heads} heads, head size {HEAD_DIM}, window {WINDOW}, key lengths "
        f"in [T/2, T]. Time per query should stay flat for local heads (linear cost) and grow linearly for global "
        f"heads (quadratic cost). The slope is the least-squares slope of log(time) against log(T) over the longer "
        f"half of the lengths. Each length is timed twice in the same rounds: *hot* on the same inputs every call, "
        f"which stay in the last-level cache ({last_level_cache_bytes() / 2 ** 20:.0f} MiB here) at short lengths and "
        f"not at long ones, and *cold* cycling through enough copies of the inputs to span twice that cache, so "
        f"every length reads from memory. The hot slope mixes the kernel's cost with the step from cache to memory; "
        f"the cold slope is the kernel's, and it is what the target reads."))
    rows, slopes = [], []
    for spec in ("local", "global"):
        for backward in (False, True):
            kind_rows, hot_slope, cold_slope = time_rows(sizes, spec, backward, timing)
            rows += kind_rows
            slopes.append([spec, pass_name(backward), hot_slope, cold_slope])
            if spec == "local":
                section.figure("local_slope", cold_slope,
                               f"local heads, {pass_name(backward)}, T={sizes.lengths[-1]}, cold inputs")
    section.tables.append(Table("Time against length", [
        "heads", "pass", "T", "hot ms", "hot ms / T (µs)", "cold ms", "cold ms / T (µs)",
        "cold ms / T relative to the shortest T"], rows))
    section.tables.append(Table("Log-log slope of time against length", ["heads", "pass", "hot slope", "cold slope"],
                                slopes))
    names = [f"{c} {s} MiB" for c, s in MEMORY_CONTENDERS]
    section.tables.append(Table(
        "Peak memory of one forward+backward against length", ["T"] + names + ["one (B,H,T,S) float32 MiB"],
        memory_rows(sizes),
        "Peak resident memory above the resident set before the call (inputs included in neither), measured in a "
        "fresh process per contender with VmHWM reset between lengths (see `benchmarks/memory.py` for why not "
        "ru_maxrss or tracemalloc). SDPA's figure includes nothing for its mask, which is built before the call."))
    return section
