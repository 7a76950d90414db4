"""Bad calls of ``mma_nmt::multihop_gate`` and ``mma_nmt::multihop_gate_backward`` (direct calls included, which autograd
never makes) raise errors that name the argument and what was expected."""

from __future__ import annotations

import pytest
import torch

from mma_nmt.reference.multihop import head_gate_reference

FORWARD = torch.ops.mma_nmt.multihop_gate.default
BACKWARD = torch.ops.mma_nmt.multihop_gate_backward.default


def _good():
    gen = torch.Generator().manual_seed(3)
    qp, hp = torch.randn(2, 3, 4, 5, generator=gen), torch.randn(2, 3, 4, 5, generator=gen)
    vp, v_b = torch.randn(2, 3, 4, 6, generator=gen), torch.randn(5, generator=gen)
    return dict(query_proj=qp, head_proj=hp, value_proj=vp, v_b=v_b)


def _good_backward():
    args = _good()
    out, gate = FORWARD(*args.values())
    return dict(grad_out=torch.randn_like(out), grad_gate=torch.randn_like(gate), **args, gate=gate)


META = dict(device="meta")


@pytest.mark.parametrize("changes, match", [
    (dict(query_proj=torch.zeros(())), "query_proj must have shape"),
    (dict(query_proj=torch.zeros(2, 3, 4, 5, 1)), "query_proj must have shape"),
    (dict(value_proj=torch.zeros(2, 3, 4)), "value_proj must have shape"),
    (dict(v_b=torch.zeros(1, 5)), "v_b must have shape"),
    (dict(v_b=torch.zeros(())), "v_b must have shape"),
    (dict(head_proj=torch.zeros(1, 3, 4, 5)), "head_proj must have shape"),
    (dict(head_proj=torch.zeros(2, 2, 4, 5)), "head_proj must have shape"),
    (dict(value_proj=torch.zeros(2, 2, 4, 6)), "value_proj must have shape"),
    (dict(value_proj=torch.zeros(2, 3, 3, 6)), "value_proj must have shape"),
    (dict(value_proj=torch.zeros(2, 3, 4, 6, dtype=torch.float64)), "value_proj must have dtype"),
    (dict(v_b=torch.zeros(5, dtype=torch.float64)), "v_b must have dtype"),
    (dict(v_b=torch.zeros(5, dtype=torch.int64)), "v_b must have dtype"),
    (dict(query_proj=torch.zeros(2, 3, 4, 5, dtype=torch.complex64)), "floating-point"),
    (dict(query_proj=torch.zeros(2, 3, 4, 5, dtype=torch.bfloat16)), "head_proj must have dtype"),
    (dict(query_proj=torch.zeros(2, 3, 4, 5, dtype=torch.bfloat16),
          head_proj=torch.zeros(2, 3, 4, 5, dtype=torch.bfloat16),
          value_proj=torch.zeros(2, 3, 4, 6, dtype=torch.bfloat16), v_b=torch.zeros(5, dtype=torch.bfloat16)),
     "float32 or float64"),
    (dict(head_proj=torch.zeros(2, 3, 4, 5, **META)), "head_proj is on meta"),
    (dict(value_proj=torch.zeros(2, 3, 4, 6, **META)), "value_proj is on meta"),
    (dict(v_b=torch.zeros(5, **META)), "v_b is on meta"),
    (dict(query_proj=torch.zeros(2, 0, 4, 5), head_proj=torch.zeros(2, 0, 4, 5), value_proj=torch.zeros(2, 0, 4, 6)),
     "heads"),
    (dict(query_proj=torch.zeros(1, 65, 1, 5), head_proj=torch.zeros(1, 65, 1, 5), value_proj=torch.zeros(1, 65, 1, 6)),
     "heads"),
])
def test_forward_rejects_bad_input(changes, match):
    args = {**_good(), **changes}
    with pytest.raises((ValueError, TypeError, RuntimeError), match=match):
        FORWARD(*args.values())


def test_backward_accepts_good_arguments_and_matches_autograd():
    args = _good_backward()
    grad_pre, grad_value, grad_v_b = BACKWARD(*args.values())
    leaves = {n: args[n].clone().requires_grad_() for n in ("query_proj", "head_proj", "value_proj", "v_b")}
    out, gate = head_gate_reference(*leaves.values())
    want = torch.autograd.grad((out, gate), list(leaves.values()), (args["grad_out"], args["grad_gate"]))
    torch.testing.assert_close(grad_pre, want[0])
    torch.testing.assert_close(grad_value, want[2])
    torch.testing.assert_close(grad_v_b, want[3])


@pytest.mark.parametrize("changes, match", [
    (dict(grad_out=torch.zeros(2, 3, 4)), "grad_out must have shape"),
    (dict(grad_out=torch.zeros(2, 3, 4, 5)), "grad_out must have shape"),
    (dict(grad_out=torch.zeros(2, 3, 4, 6, dtype=torch.float64)), "grad_out must have dtype"),
    (dict(grad_out=torch.zeros(2, 3, 4, 6, **META)), "grad_out is on meta"),
    (dict(grad_out=torch.zeros(0, 3, 4, 6)), "grad_out must have shape"),
    (dict(grad_gate=torch.zeros(2, 3)), "grad_gate must have shape"),
    (dict(grad_gate=torch.zeros(2, 3, 4, dtype=torch.float64)), "grad_gate must have dtype"),
    (dict(grad_gate=torch.zeros(2, 3, 4, **META)), "grad_gate is on meta"),
    (dict(gate=torch.zeros(2, 3, 5)), "gate must have shape"),
    (dict(gate=torch.zeros(2, 3, 4, dtype=torch.int64)), "gate must have dtype"),
    (dict(gate=torch.zeros(2, 3, 4, **META)), "gate is on meta"),
    (dict(query_proj=torch.zeros(2, 3, 4)), "query_proj must have shape"),
    (dict(head_proj=torch.zeros(2, 3, 4, 4)), "head_proj must have shape"),
    (dict(value_proj=torch.zeros(2, 3, 4, 5)), "must have shape"),
    (dict(v_b=torch.zeros(4)), "v_b must have shape"),
    (dict(v_b=torch.zeros(5, **META)), "v_b is on meta"),
])
def test_backward_rejects_bad_input(changes, match):
    args = {**_good_backward(), **changes}
    with pytest.raises((ValueError, TypeError, RuntimeError), match=match):
        BACKWARD(*args.values())


def test_backward_without_grad_gate_and_on_empty_tensors():
    args = _good_backward()
    args["grad_gate"] = None
    grads = BACKWARD(*args.values())
    assert [tuple(g.shape) for g in grads] == [(2, 3, 4, 5), (2, 3, 4, 6), (5,)]
    empty = dict(query_proj=torch.zeros(0, 3, 4, 5), head_proj=torch.zeros(0, 3, 4, 5),
                 value_proj=torch.zeros(0, 3, 4, 6), v_b=torch.randn(5))
    out, gate = FORWARD(*empty.values())
    grads = BACKWARD(torch.zeros_like(out), torch.zeros_like(gate), *empty.values(), gate)
    assert [tuple(g.shape) for g in grads] == [(0, 3, 4, 5), (0, 3, 4, 6), (5,)]
    assert not grads[2].any()
