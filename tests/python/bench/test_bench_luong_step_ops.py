"""The op counter of one Luong decoder step (``python -m benchmarks.luong_step_ops``): it sees the fused operator once
each way and the reference's formula instead, and leaves views out."""

from __future__ import annotations

import pytest
import torch

from benchmarks import luong_step_ops


@pytest.mark.parametrize("score_form", ["projected_keys", "projected_query"])
def test_the_fused_step_dispatches_its_operator_once_each_way(score_form):
    forward, backward = luong_step_ops.step_ops("fused", score_form)
    assert forward["shared_value_attention"] == 1 and backward["shared_value_attention_backward"] == 1
    reference_forward, reference_backward = luong_step_ops.step_ops("reference", score_form)
    assert "shared_value_attention" not in reference_forward and "_softmax" in reference_forward
    assert "_softmax_backward_data" in reference_backward
    assert sum(forward.values()) < sum(reference_forward.values())
    assert not luong_step_ops.NOT_LAUNCHES & (forward.keys() | backward.keys())


def test_views_are_not_counted():
    with luong_step_ops.OpCounter() as counter:
        x = torch.randn(2, 3)
        x.t().unsqueeze(0).view(3, 2).add(1)
    assert counter.ops == {"randn": 1, "add": 1}
