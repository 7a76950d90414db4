"""Every attention module compiles with ``torch.compile(fullgraph=True)`` given a ``key_padding_mask`` (issue 50,
case 20): the mask's right-padding check was a data-dependent ``torch.equal``, which stopped the graph. Compiled
results equal eager ones, and a mask with a hole is still refused when the compiled code runs."""

from __future__ import annotations

import pytest
import torch

from mma_nmt.modules import (GmmAttentionConfig, GmmCrossAttention, LuongAttentionConfig, LuongMultiheadAttention,
                             MixedAttentionConfig, MixedMultiheadAttention, MultiHopAttentionConfig,
                             MultiHopSelfAttention, MultiLayerAttentionConfig, MultiLayerMultiheadAttention)
from test_module_padding_mask_shape import X, _mask


def _luong_step(module, mask):
    return module(X[:, 0], module.precompute(X, key_padding_mask=mask))[0]


# name -> (module builder, forward(module, mask) -> output); the calls of test_module_padding_mask_shape
MODULES = {
    "MixedMultiheadAttention": (lambda: MixedMultiheadAttention(MixedAttentionConfig(16, 4)),
                                lambda m, mask: m(X, key_padding_mask=mask)[0]),
    "GmmCrossAttention": (lambda: GmmCrossAttention(GmmAttentionConfig(16, 4)),
                          lambda m, mask: m(X[:, :3], X, key_padding_mask=mask)[0]),
    "LuongMultiheadAttention": (lambda: LuongMultiheadAttention(LuongAttentionConfig(16, 2, softmax_dim=8, feed_dim=8)),
                                _luong_step),
    "MultiLayerMultiheadAttention": (lambda: MultiLayerMultiheadAttention(MultiLayerAttentionConfig(16, 4, num_layers=2)),
                                     lambda m, mask: m(X[:, :3], [X, X.flip(1)], key_padding_mask=mask)[0]),
    "MultiHopSelfAttention": (lambda: MultiHopSelfAttention(MultiHopAttentionConfig(16, 4)),
                              lambda m, mask: m(X, key_padding_mask=mask)[0]),
}


pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def _built(name: str):
    """(module, eager forward of a mask, the same forward compiled whole with aot_eager)."""
    build, forward = MODULES[name]
    torch.manual_seed(0)
    module = build()
    compiled = torch.compile(lambda mask: forward(module, mask), fullgraph=True, backend="aot_eager")
    return module, (lambda mask: forward(module, mask)), compiled


@pytest.mark.parametrize("name", list(MODULES))
def test_modules_compile_whole_with_a_key_padding_mask_and_match_eager(name):
    module, eager, compiled = _built(name)
    module.eval()
    mask = _mask(2, 5, 3)
    torch.testing.assert_close(compiled(mask), eager(mask), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", list(MODULES))
def test_a_mask_with_a_hole_is_refused_when_the_compiled_code_runs(name):
    """Compiled code cannot branch on the mask's values, so it takes the mask as right padding and asserts it. In eager
    mode ``MixedMultiheadAttention`` (the ``nn.MultiheadAttention`` drop-in) honours a mask with holes on the
    plain-PyTorch formula (checked against torch's module in ``test_multihead_dropin.py``); the others refuse it."""
    module, eager, compiled = _built(name)
    holed = _mask(2, 5, 3)
    holed[0, 1] = True  # padding before a real key: no length stands for it
    with pytest.raises(RuntimeError, match="key_padding_mask must mark padding only at the end of each row"):
        compiled(holed)
    if name == "MixedMultiheadAttention":
        assert torch.isfinite(eager(holed)).all()
    else:
        with pytest.raises(ValueError, match="key_padding_mask must mark padding only at the end of each row"):
            eager(holed)


DROPOUT_MODULES = {
    "MixedMultiheadAttention": lambda: MixedMultiheadAttention(MixedAttentionConfig(16, 4, head_spec="GLFB",
                                                                                    dropout=0.3)),
    "MultiHopSelfAttention": lambda: MultiHopSelfAttention(MultiHopAttentionConfig(16, 4, dropout=0.3)),
}


@pytest.mark.parametrize("name", list(DROPOUT_MODULES))
def test_attention_dropout_in_training_compiles_whole_and_matches_eager(name):
    """The dropout seed is drawn from torch's generator inside the graph (it was an ``int`` argument, which refused
    the traced draw: "Expected a value of type 'int' for argument 'seed' but instead found type 'SymInt'"); the same
    generator state gives the same mask, compiled or not, in the forward and the backward."""
    torch.manual_seed(0)
    module = DROPOUT_MODULES[name]().train()
    mask = _mask(2, 5, 3)

    def step(x):
        out = module(x, key_padding_mask=mask)[0]
        grads = torch.autograd.grad(out.pow(2).sum(), [p for p in module.parameters()])
        return out, grads

    compiled = torch.compile(lambda x: module(x, key_padding_mask=mask)[0], fullgraph=True, backend="aot_eager")
    torch.manual_seed(7)
    want, want_grads = step(X)
    torch.manual_seed(7)
    got = compiled(X)
    got_grads = torch.autograd.grad(got.pow(2).sum(), [p for p in module.parameters()])
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)
    torch.manual_seed(8)
    assert (compiled(X) - want).abs().max() > 1e-3  # another generator state, another dropout mask
