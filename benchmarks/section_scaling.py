"""Section "scaling": time of the fused operator against length for global and local heads (all lengths of one kind
and pass interleaved in the same rounds), and peak memory of one forward+backward against length for the fused
operator, SDPA with a boolean mask and the reference (in fresh processes, see ``memory``)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from benchmarks.bench_attention import make_case, runners
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


def time_rows(sizes: Sizes, spec: str, backward: bool, timing: dict) -> tuple[list[list], float]:
    """Rows [kind, pass, T, ms, µs per query position, ratio to that at the shortest length], and the log-log slope
    over the upper half of the lengths (where fixed per-call costs no longer dominate)."""
    calls = []
    for length in sizes.lengths:
        case = make_case(sizes.batch, sizes.heads, length, HEAD_DIM, spec, WINDOW, backward)
        calls.append(runners(case, WINDOW, backward, ("fused",))[0])
    with torch.set_grad_enabled(backward):
        seconds = time_interleaved(calls, **timing)
    per_query = [s / n for s, n in zip(seconds, sizes.lengths)]
    rows = [[spec, pass_name(backward), n, s * 1e3, p * 1e6, p / per_query[0]]
            for n, s, p in zip(sizes.lengths, seconds, per_query)]
    upper = len(sizes.lengths) // 2
    return rows, log_slope(sizes.lengths[upper:], seconds[upper:])


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
        f"half of the lengths."))
    rows, slopes = [], []
    for spec in ("local", "global"):
        for backward in (False, True):
            kind_rows, slope = time_rows(sizes, spec, backward, timing)
            rows += kind_rows
            slopes.append([spec, pass_name(backward), slope])
            if spec == "local":
                section.figure("local_slope", slope, f"local heads, {pass_name(backward)}, T={sizes.lengths[-1]}")
    section.tables.append(Table("Time against length", ["heads", "pass", "T", "ms", "ms / T (µs)",
                                                         "ms / T relative to the shortest T"], rows))
    section.tables.append(Table("Log-log slope of time against length", ["heads", "pass", "slope"], slopes))
    names = [f"{c} {s} MiB" for c, s in MEMORY_CONTENDERS]
    section.tables.append(Table(
        "Peak memory of one forward+backward against length", ["T"] + names + ["one (B,H,T,S) float32 MiB"],
        memory_rows(sizes),
        "Peak resident memory above the resident set before the call (inputs included in neither), measured in a "
        "fresh process per contender with VmHWM reset between lengths (see `benchmarks/memory.py` for why not "
        "ru_maxrss or tracemalloc). SDPA's figure includes nothing for its mask, which is built before the call."))
    return section
