"""Peak memory of one call, measured in a fresh Python process.

Why this way: torch's CPU allocator keeps no peak statistics (``torch.cuda.max_memory_allocated`` has no CPU
counterpart), ``tracemalloc`` does not see torch's allocations, and ``ru_maxrss`` cannot be reset and counts the
import of torch. The child reads ``VmHWM`` (peak resident set) from ``/proc/self/status`` after resetting it to the
current resident set (``/proc/self/clear_refs``), so one child can measure several calls in turn, each as "peak
during the call minus resident before it". glibc is told to map every block above 64 KiB on its own
(``MALLOC_MMAP_THRESHOLD_``), so freed temporaries leave the resident set and the peak is the live peak.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parent.parent


def status_mib(field: str) -> float:
    """A memory field of /proc/self/status (VmRSS, VmHWM) in MiB."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024.0  # kB -> MiB
    raise RuntimeError(f"/proc/self/status has no {field}")


def peak_growth_mib(call: Callable[[], object]) -> float:
    """Peak resident memory above the current resident set while ``call()`` runs, in MiB (in this process)."""
    with open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")  # resets VmHWM to the current resident set
    baseline = status_mib("VmRSS")
    call()
    return status_mib("VmHWM") - baseline


def run_child(function: str, *args, threads: int | None = None, timeout: float = 600.0):
    """Runs ``function(*args)`` (dotted path ``module:name``, arguments JSON-able) in a fresh interpreter and returns
    its JSON-able result. The child's last line of standard output carries the result."""
    module, name = function.split(":")
    code = (f"import json, torch; from {module} import {name}; "
            + (f"torch.set_num_threads({threads}); " if threads else "")
            + f"print(json.dumps({name}(*json.loads({json.dumps(json.dumps(list(args)))}))))")
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=timeout,
                            cwd=REPO)  # the repository root holds the benchmarks package
    if result.returncode != 0:
        raise RuntimeError(f"{function}{args} failed in a child process:\n{result.stderr[-2000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])
