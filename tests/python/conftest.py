"""Shared fixtures of the Python test suite."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

import mma_nmt  # noqa: F401  (registers the operators)

REPO = Path(__file__).resolve().parents[2]
SHARED_DATA = Path(os.environ.get("MMA_NMT_DATA_DIR", REPO.parent / "shared" / "data"))


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.fail(f"the shared corpora are expected at {SHARED_DATA} (set MMA_NMT_DATA_DIR)")
    return SHARED_DATA


def cpu_kernel_builds() -> list[str]:
    """The CPU kernel builds this machine can run (MMA_NMT_CPU_ISA caps the choice)."""
    best = mma_nmt.build_info()["cpu_kernel"]
    order = ["default", "avx2", "avx512"]
    return order[: order.index(best) + 1]
