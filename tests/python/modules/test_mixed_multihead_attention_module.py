"""The MixedMultiheadAttention module: fused and reference implementations agree, and it behaves as encoder attention."""

from __future__ import annotations

import copy

import pytest
import torch

from mma_nmt.modules import MixedAttentionConfig, MixedMultiheadAttention


def twin_modules(**overrides):
    config = MixedAttentionConfig(embed_dim=32, num_heads=8, head_spec="GLFB", window=1, **overrides)
    fused = MixedMultiheadAttention(config)
    reference = copy.deepcopy(fused)
    reference.config = MixedAttentionConfig(**{**config.__dict__, "implementation": "reference"})
    return fused, reference


def test_module_fused_and_reference_agree_on_output_and_parameter_gradients():
    fused, reference = twin_modules()
    x = torch.randn(3, 11, 32, dtype=torch.float64)
    mask = torch.arange(11).unsqueeze(0) >= torch.tensor([11, 6, 1]).unsqueeze(1)
    fused.double(), reference.double()
    out_f, w_f = fused(x, key_padding_mask=mask, need_weights=True)
    out_r, w_r = reference(x, key_padding_mask=mask, need_weights=True)
    torch.testing.assert_close(out_f, out_r, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(w_f, w_r, rtol=1e-10, atol=1e-10)
    out_f.square().sum().backward()
    out_r.square().sum().backward()
    for (name, p_f), p_r in zip(fused.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p_f.grad, p_r.grad, rtol=1e-9, atol=1e-9, msg=lambda m: f"{name}: {m}")


def test_module_dropout_is_active_only_in_training():
    fused, reference = twin_modules(dropout=0.5)
    x = torch.randn(2, 9, 32)
    fused.eval()
    first, _ = fused(x)
    second, _ = fused(x)
    assert torch.equal(first, second)
    fused.train()
    torch.manual_seed(1)
    dropped, _ = fused(x)
    assert not torch.allclose(dropped, first)


def test_module_training_dropout_matches_reference_under_same_generator_state():
    fused, reference = twin_modules(dropout=0.3)
    x = torch.randn(2, 9, 32, dtype=torch.float64)
    fused.double(), reference.double()
    torch.manual_seed(5)
    out_f, _ = fused(x)
    torch.manual_seed(5)
    out_r, _ = reference(x)
    torch.testing.assert_close(out_f, out_r, rtol=1e-10, atol=1e-10)


def test_module_expands_head_spec_to_heads():
    fused, _ = twin_modules()
    assert "GGLLFFBB" in repr(fused)


def test_module_rejects_wrong_input_width():
    fused, _ = twin_modules()
    with pytest.raises(ValueError, match=r"query must have shape \(batch, len, embed_dim=32\)"):
        fused(torch.randn(2, 5, 31))


@pytest.mark.parametrize("kwargs,pattern", [(dict(embed_dim=30, num_heads=8), "divisible"),
                                            (dict(embed_dim=32, num_heads=8, window=-2), "window"),
                                            (dict(embed_dim=32, num_heads=8, head_spec="GLF"), "neither equals"),
                                            (dict(embed_dim=32, num_heads=8, implementation="cuda"), "implementation")])
def test_module_config_errors(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        MixedMultiheadAttention(MixedAttentionConfig(**kwargs))


def test_causal_module_step_by_step_equals_full_sequence():
    config = MixedAttentionConfig(embed_dim=16, num_heads=2, head_spec="C")
    attention = MixedMultiheadAttention(config).double()
    x = torch.randn(2, 6, 16, dtype=torch.float64)
    full, _ = attention(x)
    for t in range(6):
        step, _ = attention(x[:, t:t + 1], x[:, : t + 1], query_offset=t)
        torch.testing.assert_close(step[:, 0], full[:, t], rtol=1e-10, atol=1e-10)
