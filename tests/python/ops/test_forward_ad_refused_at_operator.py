"""Every fused operator called as ``torch.ops.mma_nmt.<name>`` directly, not through its Python function, refuses
forward-mode tangents (issue 50, case 10: it returned no tangent, silently) and ``torch.func``'s differentiating
transforms with an error that names it (case 21: PyTorch's message named no operator). ``vmap`` alone, reverse mode
and gradcheck of the operator itself still work."""

from __future__ import annotations

import pytest
import torch
import torch.autograd.forward_ad as forward_ad
from torch.utils._python_dispatch import TorchDispatchMode

from mma_nmt.ops.first_order import FunctionalTransformError, HigherOrderGradientError
from mma_nmt.ops.registration import REGISTERED_OPERATORS
from test_higher_order_gradients import OPERATORS, _query


class _RecordCalls(TorchDispatchMode):
    """Records the arguments of the first call of each ``mma_nmt`` operator."""

    def __init__(self):
        super().__init__()
        self.calls = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.name()
        if name.startswith("mma_nmt::") and name not in self.calls:
            self.calls[name] = (func, args)
        return func(*args, **(kwargs or {}))


def _direct_call(op: str):
    """``(function of x, x)``: the operator ``op`` ("mma_nmt.attention") called through ``torch.ops`` with the arguments
    its Python function passes, its first tensor argument replaced by x; the function returns the first output."""
    with torch.no_grad(), _RecordCalls() as recorder:
        OPERATORS[op](_query().detach())
    func, args = recorder.calls[op.replace(".", "::")]
    assert func._schema.name == op.replace(".", "::")
    first_is_list = isinstance(args[0], (list, tuple))
    x = (args[0][0] if first_is_list else args[0]).clone()

    def call(x):
        first = [x, *args[0][1:]] if first_is_list else x
        return func(first, *args[1:])[0]

    return call, x


@pytest.mark.parametrize("op", list(OPERATORS))
def test_forward_ad_through_the_operator_itself_raises_naming_it(op):
    call, x = _direct_call(op)
    with pytest.raises(HigherOrderGradientError, match=rf"^{op}: forward-mode derivatives"):
        with forward_ad.dual_level():
            call(forward_ad.make_dual(x, torch.ones_like(x)))
    with pytest.raises(HigherOrderGradientError, match=rf"^{op}: forward-mode derivatives"):
        torch.func.jvp(call, (x,), (torch.ones_like(x),))


@pytest.mark.parametrize("transform", ["grad", "jacrev", "vmap(grad)"])
@pytest.mark.parametrize("op", list(OPERATORS))
def test_torch_func_transforms_name_the_operator_and_the_way_out(op, transform):
    call, x = _direct_call(op)
    wrapper = lambda q: OPERATORS[op](q)  # noqa: E731  the Python function, as users call it
    for function in (call, wrapper):
        x_in = x if function is call else _query().detach()
        if transform == "grad":
            run = lambda: torch.func.grad(lambda t: function(t).sum())(x_in)  # noqa: E731
        elif transform == "jacrev":
            run = lambda: torch.func.jacrev(function)(x_in)  # noqa: E731
        else:
            run = lambda: torch.func.vmap(torch.func.grad(lambda t: function(t).sum()), randomness="same")(  # noqa: E731
                x_in.unsqueeze(0))
        with pytest.raises(FunctionalTransformError, match=rf"^{op}: torch.func transforms .* torch.autograd.grad"):
            run()


@pytest.mark.parametrize("op", list(OPERATORS))
def test_the_operator_itself_still_has_first_order_gradients(op):
    call, x = _direct_call(op)
    x.requires_grad_()
    assert torch.autograd.gradcheck(call, (x,))
    grad, = torch.autograd.grad(call(x).pow(2).sum(), x)
    assert grad.abs().max() > 0


@pytest.mark.filterwarnings("ignore:.*performance drop.*")
def test_vmap_without_gradients_still_works():
    call, x = _direct_call("mma_nmt.attention")
    batch = torch.stack([x, x * 2])
    torch.testing.assert_close(torch.func.vmap(call)(batch)[1], call(x * 2))


@pytest.mark.parametrize("op", list(OPERATORS))
def test_a_tangent_on_any_argument_is_refused(op):
    """Through the operator's eager entry (``RegisteredOperator``, which walks the arguments lazily), a tangent on
    every floating-point argument, each in turn, those inside a Tensor[] list included, raises."""
    with torch.no_grad(), _RecordCalls() as recorder:
        OPERATORS[op](_query().detach())
    _, args = recorder.calls[op.replace(".", "::")]
    places = [(i, j) for i, arg in enumerate(args)
              for j, t in (enumerate(arg) if isinstance(arg, (list, tuple)) else [(None, arg)])
              if isinstance(t, torch.Tensor) and t.is_floating_point()]
    assert len(places) >= 3  # q, k and v at least
    for i, j in places:
        with forward_ad.dual_level():
            dual = list(args)
            if j is None:
                dual[i] = forward_ad.make_dual(args[i], torch.ones_like(args[i]))
            else:
                dual[i] = [forward_ad.make_dual(t, torch.ones_like(t)) if n == j else t for n, t in enumerate(args[i])]
            with pytest.raises(HigherOrderGradientError, match=rf"^{op}: forward-mode derivatives"):
                REGISTERED_OPERATORS[op.split(".")[1]](*dual)
