"""How the suite's process allocates memory, so that a timing does not depend on what ran before it.

glibc's malloc serves big blocks with ``mmap`` and hands freed memory back to the system, and its threshold for doing
so moves with the sizes freed earlier in the process. Every call that allocates a tensor of a few MiB may therefore pay
for page faults (expensive in a virtual machine: the local-head forward+backward at B=8, T=4096 ran 4x slower per query
than at T=1024 only because of them), or may not, depending on the calls before it. ``keep_freed_memory`` fixes both
thresholds, so freed blocks are reused, as PyTorch's caching allocator does on the GPU. Both sides of every ratio run
under the same setting; ``python -m benchmarks --malloc system`` measures with glibc's defaults instead.
"""

from __future__ import annotations

import ctypes
import ctypes.util

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt parameters of glibc's malloc.h
KEEP_BYTES = 1 << 30


def keep_freed_memory(limit: int = KEEP_BYTES) -> bool:
    """Serve blocks up to ``limit`` bytes from the heap and never trim it back below ``limit``. Returns False (and
    changes nothing) where the C library has no glibc ``mallopt``."""
    name = ctypes.util.find_library("c")
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError, TypeError):
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, limit)) and bool(mallopt(_M_TRIM_THRESHOLD, limit))
