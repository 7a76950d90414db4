"""``python -m benchmarks.bench_inference_call`` on a few calls: every path of every operator runs, gives the same
results (the benchmark asserts it) and is timed; the table has a row per operator."""

from __future__ import annotations

from benchmarks import bench_inference_call
from benchmarks.bench_registration_path import OPERATORS


def test_every_operator_is_timed_on_every_path():
    best = bench_inference_call.measure(rounds=1, calls=10)
    assert list(best) == list(OPERATORS)
    for paths in best.values():
        assert set(paths) == {"RegisteredOperator", "C++ Function", "OpOverload below autograd"}
        assert all(0 < us < float("inf") for us in paths.values())
    table = bench_inference_call.render(best)
    assert all(f"`{name}`" in table for name in OPERATORS)
