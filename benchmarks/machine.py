"""What the report says about the machine and the build it measured."""

from __future__ import annotations

import os
import platform
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def last_level_cache_bytes(default: int = 32 * 2 ** 20) -> int:
    """Size of the largest CPU cache (Linux sysfs; ``default`` where it cannot be read)."""
    sizes = {}
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            level = int((index / "level").read_text())
            text = (index / "size").read_text().strip()
        except (OSError, ValueError):
            continue
        units = {"K": 2 ** 10, "M": 2 ** 20, "G": 2 ** 30}
        sizes[level] = int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)
    return sizes[max(sizes)] if sizes else default


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def git_commit() -> str:
    from mma_nmt.experiments.records import code_commit

    return code_commit(REPO, mark_dirty=True)


def machine_info() -> dict:
    """CPU, cores, torch and its threads, the mma_nmt build and the load average now (the start of a run)."""
    from mma_nmt import _C

    return {
        "cpu_model": cpu_model(),
        "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "torch_version": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "mma_nmt_build": dict(_C.build_info()),
        "git_commit": git_commit(),
        "last_level_cache_mib": last_level_cache_bytes() / 2 ** 20,
        "load_average_start": load_average(),
    }
