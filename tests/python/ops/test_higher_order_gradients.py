"""Second-order and forward-mode derivatives of every fused operator raise an error naming the operator instead of
returning zeros (issue 19, item 1); first-order gradients (plain backward, gradcheck) are unchanged."""

from __future__ import annotations

import pytest
import torch

from mma_nmt.ops import (fused_attention, gmm_attention, multihop_gate, multihop_second_hop, multilayer_attention,
                         shared_value_attention)
from mma_nmt.ops.first_order import HigherOrderGradientError


def _randn(*shape, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _attention(q):
    k, v = _randn(1, 2, 4, 3, seed=1), _randn(1, 2, 4, 3, seed=2)
    return fused_attention(q, k, v, head_kinds="GL").out


def _gmm(q):
    k, v = _randn(1, 2, 4, 3, seed=1), _randn(1, 2, 4, 3, seed=2)
    omega = _randn(1, 2, 3, 2, seed=3).softmax(-1)
    mu, sigma = _randn(1, 2, 3, 2, seed=4).abs() * 2, _randn(1, 2, 3, 2, seed=5).abs() + 0.5
    return gmm_attention(q, k, v, omega=omega, mu=mu, sigma=sigma, gate=_randn(1, 2, 3, seed=6).sigmoid()).out


def _shared_value(q):
    return shared_value_attention(q, _randn(1, 2, 4, 3, seed=1), _randn(1, 4, 5, seed=2)).out


def _multilayer(q):
    queries = [q.flatten(1, 2).reshape(1, 3, 6), _randn(1, 3, 6, seed=1)]  # (B, T, E) per layer, E = 2 heads x 3
    keys = [_randn(1, 4, 6, seed=2), _randn(1, 4, 6, seed=3)]
    return multilayer_attention(queries, keys, [_randn(1, 4, 6, seed=4)], num_heads=2).out


def _head_gate(q):
    return multihop_gate(q, _randn(1, 2, 3, 3, seed=1), _randn(1, 2, 3, 4, seed=2), _randn(3, seed=3)).out


def _second_hop(q):
    a, w_b, u_b = _randn(1, 2, 3, 3, seed=1), _randn(4, 3, seed=2), _randn(2, 4, 3, seed=3)
    return multihop_second_hop(q, a, w_b, u_b, _randn(2, 5, 3, seed=4), _randn(4, seed=5)).out


OPERATORS = {"mma_nmt.attention": _attention, "mma_nmt.gmm_attention": _gmm,
             "mma_nmt.shared_value_attention": _shared_value, "mma_nmt.multilayer_attention": _multilayer,
             "mma_nmt.multihop_gate": _head_gate, "mma_nmt.multihop_second_hop": _second_hop}


def _query():
    return _randn(1, 2, 3, 3, seed=0).requires_grad_()


@pytest.mark.parametrize("op", list(OPERATORS))
def test_double_backward_raises_naming_the_operator(op):
    q = _query()
    with pytest.raises(HigherOrderGradientError, match=rf"^{op}: second-order gradients"):
        torch.autograd.grad(OPERATORS[op](q).pow(2).sum(), q, create_graph=True)
    with pytest.raises(HigherOrderGradientError, match=rf"^{op}: second-order"):
        torch.autograd.functional.hessian(lambda x: OPERATORS[op](x).pow(2).sum(), q.detach())


@pytest.mark.parametrize("op", list(OPERATORS))
def test_forward_mode_raises_naming_the_operator(op):
    q = _query().detach()
    with pytest.raises(HigherOrderGradientError, match=rf"^{op}: forward-mode derivatives"):
        torch.func.jvp(OPERATORS[op], (q,), (torch.ones_like(q),))
    with pytest.raises(HigherOrderGradientError, match=rf"^{op}: forward-mode"):
        with torch.autograd.forward_ad.dual_level():
            OPERATORS[op](torch.autograd.forward_ad.make_dual(q, torch.ones_like(q)))


@pytest.mark.parametrize("op", list(OPERATORS))
def test_first_order_gradients_still_work(op):
    q = _query()
    assert torch.autograd.gradcheck(OPERATORS[op], (q,))
    grad, = torch.autograd.grad(OPERATORS[op](q).pow(2).sum(), q)
    assert grad.abs().max() > 0
