"""Operator arguments that used to fail inside the dispatcher or with an AttributeError now say what was expected
(issue 19, "Messages")."""

from __future__ import annotations

import pytest
import torch

from mma_nmt.ops import fused_attention, gmm_attention, multilayer_attention, shared_value_attention

Q, K = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 5, 4)


@pytest.mark.parametrize("name, value", [("window", 2**63), ("window", -(2**63) - 1), ("seed", 2**63),
                                         ("seed", 2**64), ("query_offset", 2**63)])
def test_integers_beyond_int64_name_the_argument_and_the_range(name, value):
    with pytest.raises(ValueError, match=rf"^mma_nmt.attention: {name} must be a 64-bit integer in "
                                         rf"\[-2\*\*63, 2\*\*63 - 1\], got {value}$"):
        fused_attention(Q, K, K, head_kinds="GL", dropout_p=0.1, **{name: value})


GMM = dict(omega=torch.ones(1, 2, 3, 1), mu=torch.ones(1, 2, 3, 1), sigma=torch.ones(1, 2, 3, 1), gate=torch.ones(1, 2, 3))
CALLS = {
    "mma_nmt.attention": lambda **padding: fused_attention(Q, K, K, **padding),
    "mma_nmt.gmm_attention": lambda **padding: gmm_attention(Q, K, K, **GMM, **padding),
    "mma_nmt.shared_value_attention": lambda **padding: shared_value_attention(Q, K, K[:, 0], **padding),
}


@pytest.mark.parametrize("op", list(CALLS))
def test_padding_given_as_python_lists_is_refused_as_such(op):
    with pytest.raises(TypeError, match=rf"^{op}: key_lengths must be a \(batch,\) int64 tensor or None, got list$"):
        CALLS[op](key_lengths=[5])
    with pytest.raises(TypeError, match=rf"^{op}: key_padding_mask must be a \(batch, key_len\) bool tensor or "
                                        rf"None, got list$"):
        CALLS[op](key_padding_mask=[[False] * 5])


def test_multilayer_key_lengths_as_a_list_is_refused_as_such():
    q, k = [torch.randn(1, 3, 4)], [torch.randn(1, 5, 4)]
    with pytest.raises(TypeError, match=r"^mma_nmt.multilayer_attention: key_lengths must be a \(batch,\) int64 "
                                        r"tensor or None, got list$"):
        multilayer_attention(q, k, k, num_heads=2, key_lengths=[5])


def test_multilayer_without_layers_says_what_is_missing():
    with pytest.raises(ValueError, match="^mma_nmt.multilayer_attention: q must hold one tensor per encoder layer, "
                                         "got none$"):
        multilayer_attention([], [], [], num_heads=2)


def test_head_kinds_none_says_what_is_expected():
    with pytest.raises(TypeError, match=r"^head_kinds must be a string of the letters G, L, F, B, C or a sequence "
                                        r"of HeadKind values, got None$"):
        fused_attention(Q, K, K, head_kinds=None)
