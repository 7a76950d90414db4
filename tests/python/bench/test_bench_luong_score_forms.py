"""The benchmark of the two Luong score forms (``python -m benchmarks.bench_luong_attention --score-forms``, issue 49):
what it times is built and computes the same thing in both forms (checked here on the CPU in float64, untimed)."""

from __future__ import annotations

import pytest
import torch

from benchmarks import bench_luong_attention


@pytest.mark.parametrize("implementation", ["fused", "reference"])
def test_score_form_contenders_compute_the_same_steps(implementation):
    pairs, leaves = bench_luong_attention.score_form_contenders(
        3, 8, steps=3, hidden=6, heads=2, feed=4, src_len=5, implementation=implementation, dtype=torch.float64)
    assert len(pairs) == 2 and all(leaf.requires_grad for leaf in leaves)
    for what, (projected_query, projected_keys) in pairs.items():
        got, want = projected_query(), projected_keys()
        assert isinstance(got, tuple)  # what timing.timed_call takes
        assert len(got) == len(want) == (2 if "one step" in what else 6)  # (a~, a-) per step
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_device_and_dtype_are_refused_without_score_forms():
    with pytest.raises(SystemExit):
        bench_luong_attention.main(["--device", "cuda"])
