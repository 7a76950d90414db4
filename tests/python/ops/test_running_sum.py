"""``running_sum``: cumsum, or additions by doubling under deterministic algorithms (torch 2.13's float cumsum on
CUDA raises there). The doubling scan against cumsum in float64 on odd lengths, its gradients, and the mode's
dispatch."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from mma_nmt.ops.running_sum import prefix_sums_by_doubling, running_sum


class _OpNames(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


@pytest.fixture
def deterministic():
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(False)


@pytest.mark.parametrize("length", [1, 2, 3, 5, 8, 13, 17])
@pytest.mark.parametrize("dim", [0, 2, -1])
def test_doubling_equals_cumsum_in_float64(length, dim):
    g = torch.Generator().manual_seed(length)
    shape = [2, 3, 4, 3]
    shape[dim] = length
    x = torch.randn(shape, generator=g, dtype=torch.float64)
    torch.testing.assert_close(prefix_sums_by_doubling(x, dim), torch.cumsum(x, dim), rtol=1e-12, atol=1e-12)


def test_doubling_keeps_float32_within_rounding_of_cumsum():
    x = torch.rand(3, 2, 200, 4, generator=torch.Generator().manual_seed(0)) * 5  # a synthesis network's positive steps
    torch.testing.assert_close(prefix_sums_by_doubling(x, 2), torch.cumsum(x.double(), 2).float(), rtol=1e-6,
                               atol=1e-5)


@pytest.mark.parametrize("length", [1, 6, 9])
def test_doubling_gradients_in_float64(length):
    x = torch.randn(2, length, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: prefix_sums_by_doubling(t, 1), (x,))
    assert torch.autograd.gradgradcheck(lambda t: prefix_sums_by_doubling(t, 1), (x,))


def test_without_the_mode_it_is_cumsum():
    x = torch.randn(2, 7, 3)
    with _OpNames() as ops:
        out = running_sum(x, 1)
    assert ops.names == ["cumsum"]
    assert torch.equal(out, torch.cumsum(x, 1))


def test_under_deterministic_algorithms_no_cumsum_runs_forward_or_backward(deterministic):
    x = torch.randn(2, 7, 3, dtype=torch.float64, requires_grad=True)
    with _OpNames() as ops:
        out = running_sum(x, 1)
        out.backward(torch.ones_like(out))
    assert "cumsum" not in ops.names and "add" in ops.names
    torch.testing.assert_close(out, torch.cumsum(x.detach(), 1), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(x.grad, torch.arange(7, 0, -1, dtype=torch.float64).view(1, 7, 1).expand(2, 7, 3))


def test_integer_running_sums_stay_cumsum_under_the_mode(deterministic):
    """torch's integer cumsum on CUDA is deterministic (exact); only floating point needs the doubling."""
    x = torch.arange(12).view(3, 4)
    with _OpNames() as ops:
        out = running_sum(x, 1)
    assert ops.names == ["cumsum"] and torch.equal(out, torch.cumsum(x, 1))
