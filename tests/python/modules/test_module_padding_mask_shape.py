"""Every attention module refuses a ``key_padding_mask`` whose shape is not (batch, key_len), naming the argument and
the module (issue 19, item 2): a (2, 4) mask for 5 keys was read as lengths that turned key 5 into padding, and the
output was off by 0.1-1.5 without a word. The functional operators refused such masks already."""

from __future__ import annotations

import pytest
import torch

from mma_nmt.modules import (GmmAttentionConfig, GmmCrossAttention, LuongAttentionConfig, LuongMultiheadAttention,
                             MixedAttentionConfig, MixedMultiheadAttention, MultiHopAttentionConfig,
                             MultiHopSelfAttention, MultiLayerAttentionConfig, MultiLayerMultiheadAttention)

X = torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(0))  # (B, S, E) with S = 5 keys


def _mixed(mask, implementation):
    module = MixedMultiheadAttention(MixedAttentionConfig(16, 4, implementation=implementation))
    return module(X, key_padding_mask=mask)[0]


def _gmm(mask, implementation):
    module = GmmCrossAttention(GmmAttentionConfig(16, 4, implementation=implementation))
    return module(X[:, :3], X, key_padding_mask=mask)[0]


def _luong(mask, implementation):
    module = LuongMultiheadAttention(LuongAttentionConfig(16, 2, softmax_dim=8, feed_dim=8,
                                                          implementation=implementation))
    memory = module.precompute(X, key_padding_mask=mask)
    return module(X[:, 0], memory)[0]


def _multilayer(mask, implementation):
    module = MultiLayerMultiheadAttention(MultiLayerAttentionConfig(16, 4, num_layers=2,
                                                                    implementation=implementation))
    return module(X[:, :3], [X, X.flip(1)], key_padding_mask=mask)[0]


def _multihop(mask, implementation):
    module = MultiHopSelfAttention(MultiHopAttentionConfig(16, 4, implementation=implementation))
    return module(X, key_padding_mask=mask)[0]


MODULES = {"MixedMultiheadAttention": _mixed, "GmmCrossAttention": _gmm,
           "LuongMultiheadAttention.precompute": _luong, "MultiLayerMultiheadAttention": _multilayer,
           "MultiHopSelfAttention": _multihop}


def _mask(batch: int, width: int, real: int) -> torch.Tensor:
    return torch.arange(width).expand(batch, width) >= real  # True at padding; every row has `real` real keys


@pytest.mark.parametrize("implementation", ["fused", "reference"])
@pytest.mark.parametrize("name", list(MODULES))
@pytest.mark.parametrize("batch, width", [(2, 4), (2, 6), (1, 5), (3, 5)])
def test_a_mask_of_another_shape_than_the_keys_is_refused(name, implementation, batch, width):
    torch.manual_seed(0)
    with pytest.raises(ValueError, match=rf"^{name}: key_padding_mask must have shape \(batch, key_len\) = "
                                         rf"\(2, 5\), got \({batch}, {width}\)"):
        MODULES[name](_mask(batch, width, 4), implementation)


@pytest.mark.parametrize("name", list(MODULES))
def test_a_mask_of_the_keys_shape_is_used(name):
    torch.manual_seed(0)
    full = MODULES[name](None, "fused")
    torch.manual_seed(0)
    no_padding = MODULES[name](_mask(2, 5, 5), "fused")
    torch.manual_seed(0)
    padded = MODULES[name](_mask(2, 5, 3), "fused")
    torch.testing.assert_close(no_padding, full)
    assert (padded - full).abs().max() > 1e-3
