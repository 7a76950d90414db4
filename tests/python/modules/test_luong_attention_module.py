"""``LuongMultiheadAttention`` (multi-head Luong attention, SPEC section 2) on the fused operator and on the plain-PyTorch
reference: the paper's formula, a hand-computed example, all steps at once against step by step, reordering and bad
configs."""

import math

import pytest
import torch

from mma_nmt.modules import LuongAttentionConfig, LuongMultiheadAttention
from mma_nmt.reference import luong_attention_reference


def test_single_head_matches_hand_computed_example():
    """dh = 2, W_sc = I, hs = [[1, 0], [0, 1], padding], h_t = [ln 3, 0]: scores [ln 3, 0], alpha = [3/4, 1/4],
    c = [3/4, 1/4]. W_sm = [1, 1, 0, 0] gives a~ = tanh(3/4 + 1/4) = tanh(1); W_fd rows [0, 0, 1, 0] and
    [2, -4, 0, 0] give a- = [tanh(ln 3), tanh(3/2 - 1)] = [0.8, tanh(0.5)]."""
    module = LuongMultiheadAttention(LuongAttentionConfig(hidden_dim=2, num_heads=1, softmax_dim=1, feed_dim=2))
    with torch.no_grad():
        module.w_sc.copy_(torch.eye(2).unsqueeze(0))
        module.w_context.copy_(torch.tensor([[[1.0, 1.0], [0.0, 0.0], [2.0, -4.0]]]))  # columns acting on c
        module.w_state.copy_(torch.tensor([[[0.0, 0.0], [1.0, 0.0], [0.0, 0.0]]]))  # columns acting on h_t
    hs = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [50.0, -50.0]]])  # third position is padding
    memory = module.precompute(hs, key_lengths=torch.tensor([2]))
    a_tilde, a_bar, alpha = module(torch.tensor([[math.log(3.0), 0.0]]), memory, need_weights=True)
    torch.testing.assert_close(alpha, torch.tensor([[[0.75, 0.25, 0.0]]]))
    torch.testing.assert_close(a_tilde, torch.tensor([[math.tanh(1.0)]]))
    torch.testing.assert_close(a_bar, torch.tensor([[0.8, math.tanh(0.5)]]))


def _module(heads, implementation="fused"):
    torch.manual_seed(0)
    config = LuongAttentionConfig(hidden_dim=10, num_heads=heads, softmax_dim=12, feed_dim=8,
                                  implementation=implementation)
    return LuongMultiheadAttention(config).double()


@pytest.mark.parametrize("heads", [1, 2, 4])
def test_attention_layer_matches_paper_formula(heads):
    module = _module(heads)
    hs = torch.randn(3, 7, 10, dtype=torch.float64, requires_grad=True)
    h_t = torch.randn(3, 10, dtype=torch.float64, requires_grad=True)
    lengths = torch.tensor([7, 4, 1])
    a_tilde, a_bar, alpha = module(h_t, module.precompute(hs, key_lengths=lengths), need_weights=True)
    ref = luong_attention_reference(h_t, hs, *module.paper_weights(), key_lengths=lengths)
    for got, want in zip((a_tilde, a_bar, alpha), ref):
        torch.testing.assert_close(got, want)
    assert a_tilde.shape == (3, 12) and a_bar.shape == (3, 8)
    params = [hs, h_t, *module.parameters()]
    got = torch.autograd.grad((a_tilde.sum() + a_bar.square().sum()), params)
    want = torch.autograd.grad((ref[0].sum() + ref[1].square().sum()), params)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)


def test_all_steps_at_once_equal_step_by_step():
    module = _module(4)
    hs, states = torch.randn(2, 6, 10, dtype=torch.float64), torch.randn(2, 5, 10, dtype=torch.float64)
    memory = module.precompute(hs, key_lengths=torch.tensor([6, 2]))
    a_tilde, a_bar, alpha = module(states, memory, need_weights=True)
    for t in range(5):
        step = module(states[:, t], memory, need_weights=True)
        torch.testing.assert_close(step[0], a_tilde[:, t])
        torch.testing.assert_close(step[1], a_bar[:, t])
        torch.testing.assert_close(step[2], alpha[:, :, t])


def test_reference_implementation_and_reordering_agree():
    fused, reference = _module(2), _module(2, "reference")
    hs, h_t = torch.randn(3, 5, 10, dtype=torch.float64), torch.randn(2, 10, dtype=torch.float64)
    order = torch.tensor([2, 0])
    memory = LuongMultiheadAttention.reorder_memory(fused.precompute(hs, key_lengths=torch.tensor([5, 3, 2])), order)
    for got, want in zip(fused(h_t, memory)[:2], reference(h_t, memory)[:2]):
        torch.testing.assert_close(got, want)
    alone = fused(h_t[:1], fused.precompute(hs[2:], key_lengths=torch.tensor([2])))
    torch.testing.assert_close(fused(h_t, memory)[0][:1], alone[0])


def test_attention_layer_rejects_bad_config_and_shapes():
    with pytest.raises(ValueError, match="num_heads"):
        LuongMultiheadAttention(LuongAttentionConfig(hidden_dim=4, num_heads=3, softmax_dim=8, feed_dim=8))
    module = _module(2)
    memory = module.precompute(torch.randn(2, 3, 10, dtype=torch.float64))
    with pytest.raises(ValueError, match="decoder_states"):
        module(torch.randn(2, 9, dtype=torch.float64), memory)
    with pytest.raises(ValueError, match="encoder_states"):
        module.precompute(torch.randn(2, 3, 9, dtype=torch.float64))
