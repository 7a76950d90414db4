"""``train.deterministic``: torch's deterministic algorithms for the length of a training run.

Under ``torch.use_deterministic_algorithms(True)`` every operator that has a deterministic implementation uses it, and
one that has none raises (torch's own and ours alike). For mma_nmt's operators on a GPU that means attention's tiled
backward instead of its warp-per-row one, which adds dK and dV atomically (docs/cuda.md, "Deterministic algorithms").
cuBLAS needs a fixed workspace for that: ``CUBLAS_WORKSPACE_CONFIG`` is set to ``:4096:8`` unless the environment
already sets it. torch sizes a stream's cuBLAS workspace at the process's first GEMM there, so a process that ran
GEMMs on the GPU before training (a notebook) must set the variable itself before them. On the CPU the runs of one
config already repeat bit for bit; the flag changes nothing there but the checks. Not yet run on a GPU (2026-12-02).
No model family's training, validation or search dispatches an operator that torch's docs say raises on CUDA under the
mode (``tests/python/training/test_deterministic_model_paths.py``, on CPU tensors); the one that did under torch 2.13,
the synthesis network's float ``cumsum``, takes :func:`mma_nmt.ops.running_sum.running_sum`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import torch

CUBLAS_WORKSPACE = ":4096:8"  # one of the two settings NVIDIA documents for reproducible cuBLAS results


@contextlib.contextmanager
def deterministic_algorithms(enabled: bool) -> Iterator[None]:
    """Deterministic algorithms (and cuDNN without autotuning) inside the block when ``enabled``; the previous
    settings are restored on the way out, so that a notebook that trains and then translates gets its own back."""
    if not enabled:
        yield
        return
    was_on = torch.are_deterministic_algorithms_enabled()
    was_warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    was_benchmark = torch.backends.cudnn.benchmark
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(was_on, warn_only=was_warn_only)
        torch.backends.cudnn.benchmark = was_benchmark


__all__ = ["CUBLAS_WORKSPACE", "deterministic_algorithms"]
