"""Shared fixtures of the Python test suite."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, settings

import mma_nmt  # registers the operators

REPO = Path(__file__).resolve().parents[2]
SHARED_DATA = Path(os.environ.get("MMA_NMT_DATA_DIR", REPO.parent / "shared" / "data"))


# Property-based tests are deterministic in CI: the same examples on every run, no example database, no time limit per
# example and no too-slow health check (the 2-core machines are shared). Each test sets its own max_examples.
# HYPOTHESIS_PROFILE=explore draws new examples on every run, for searching by hand.
settings.register_profile("mma_nmt", derandomize=True, database=None, deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("explore", derandomize=False, database=None, deadline=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "mma_nmt"))


def pytest_terminal_summary(terminalreporter):
    from property_harness import CASE_COUNTS

    if CASE_COUNTS:
        counts = ", ".join(f"{name}: {n}" for name, n in sorted(CASE_COUNTS.items()))
        terminalreporter.write_line(f"property-based cases checked against the reference: {counts}")


def pytest_runtest_setup(item):
    """Tests marked ``cuda`` (the CUDA suite: ``python -m pytest -m cuda``) skip where they cannot run, saying why; with
    MMA_NMT_REQUIRE_CUDA=1 (on the GPU machine, ``make test-cuda``) they fail instead, so a broken setup is not
    mistaken for a pass."""
    if item.get_closest_marker("cuda") is None:
        return
    reason = mma_nmt.cuda_unavailable_reason()
    if reason is None:
        return
    if os.environ.get("MMA_NMT_REQUIRE_CUDA") == "1":
        pytest.fail(f"MMA_NMT_REQUIRE_CUDA=1 but {reason}", pytrace=False)
    pytest.skip(f"CUDA suite: {reason}")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture
def fresh_dynamo():
    """Dynamo's caches and counters empty before and after the test (``pytestmark =
    pytest.mark.usefixtures("fresh_dynamo")`` in a module that compiles): graph counts are the test's own, and no
    compiled code outlives it."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    yield
    torch._dynamo.reset()


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
