"""The benchmark suite: runs the sections in turn and assembles the report (see ``__main__`` for the command line)."""

from __future__ import annotations

import resource
import time
import traceback
from typing import Callable

from benchmarks import section_end_to_end, section_mixed, section_operators, section_roofline, section_scaling
from benchmarks.machine import load_average, machine_info
from benchmarks.profiles import check_profile
from benchmarks.report import Report, Section
from benchmarks.targets import evaluate

SECTIONS: dict[str, Callable[[str], Section]] = {
    "operators": section_operators.run,
    "mixed": section_mixed.run,
    "roofline": section_roofline.run,
    "scaling": section_scaling.run,
    "end_to_end": section_end_to_end.run,
}


def _cpu_seconds() -> float:
    """CPU time of this process and of its finished children (the memory measurements run in child processes)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def run_section(name: str, profile: str, *, log=print, sections: dict[str, Callable[[str], Section]] = SECTIONS
                ) -> Section:
    """One section of ``sections``; a failure becomes the section's ``error`` (the rest of the suite still runs)."""
    start, cpu = time.perf_counter(), _cpu_seconds()
    log(f"[{time.strftime('%H:%M:%S')}] section {name} ({profile}), load average {load_average()}", flush=True)
    try:
        section = sections[name](profile)
    except Exception as error:  # noqa: BLE001 - reported, not hidden: the report names the section and the error
        traceback.print_exc()
        section = Section(name, name, error=f"{type(error).__name__}: {error}")
    section.seconds = time.perf_counter() - start
    log(f"    {name}: {section.seconds:.0f} s ({_cpu_seconds() - cpu:.0f} CPU s)", flush=True)
    return section


def run_suite(profile: str, only: list[str] | None = None, *, command: str, malloc: str = "system defaults",
              log=print) -> Report:
    check_profile(profile)
    names = list(SECTIONS) if not only else only
    unknown = [n for n in names if n not in SECTIONS]
    if unknown:
        raise ValueError(f"unknown section(s) {unknown}; known: {list(SECTIONS)}")
    machine = machine_info()
    machine["malloc"] = malloc
    start = time.perf_counter()
    sections = [run_section(name, profile, log=log) for name in names]
    machine["load_average_end"] = load_average()
    return Report(title=f"mma_nmt benchmark suite, {time.strftime('%Y-%m-%d')}", machine=machine, command=command,
                  profile=profile, sections=sections, targets=evaluate(sections),
                  seconds=time.perf_counter() - start)
