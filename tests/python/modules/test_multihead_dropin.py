"""MixedMultiheadAttention as a drop-in for nn.MultiheadAttention (issue 51, point 2): built with torch's arguments or
copied with ``from_torch``, all-global heads compute what torch's module computes (outputs, weights, gradients) for
torch's mask arguments, inside nn.TransformerEncoderLayer, nn.TransformerEncoder and nn.Transformer; mixed heads
train; what it cannot honour is refused naming the argument."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from mma_nmt.modules import MixedAttentionConfig, MixedMultiheadAttention

E, H = 16, 4
TOL = dict(rtol=1e-9, atol=1e-9)  # float64 on both sides


def _twins(implementation: str, **mha_arguments):
    """An nn.MultiheadAttention (float64) and its all-global copy."""
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(E, H, dtype=torch.float64, **mha_arguments)
    return mha, MixedMultiheadAttention.from_torch(mha, head_spec="G", implementation=implementation)


def _right_padding(lengths: list[int], width: int) -> torch.Tensor:
    return torch.arange(width).unsqueeze(0) >= torch.tensor(lengths).unsqueeze(1)  # (B, S) True at padding


def _masks(name: str, batch: int, query_len: int, key_len: int) -> dict:
    """torch forward arguments exercising one of its documented mask meanings."""
    g = torch.Generator().manual_seed(1)
    holes = torch.zeros(batch, key_len, dtype=torch.bool)
    holes[:, 1] = True  # a hidden key in the middle of every row
    causal = nn.Transformer.generate_square_subsequent_mask(query_len, dtype=torch.float64)
    return {
        "none": {},
        "right_padding": {"key_padding_mask": _right_padding([key_len, key_len - 2, 3], key_len)},
        "padding_with_holes": {"key_padding_mask": holes},
        "float_padding": {"key_padding_mask": torch.randn(batch, key_len, generator=g, dtype=torch.float64)},
        "bool_attn_mask": {"attn_mask": torch.rand(query_len, key_len, generator=g) < 0.3},
        "float_attn_mask": {"attn_mask": torch.randn(query_len, key_len, generator=g, dtype=torch.float64)},
        "per_head_attn_mask": {"attn_mask": torch.rand(batch * H, query_len, key_len, generator=g) < 0.3},
        "causal_hint": {"attn_mask": causal, "is_causal": True},
        "causal_and_padding": {"attn_mask": causal.isneginf(), "key_padding_mask": _right_padding([6, 5, 4], key_len)},
    }[name]


def _visible_everywhere(arguments: dict) -> dict:
    """Keeps the diagonal visible, so that no query sees no key (torch gives NaN there, this module zeros)."""
    mask = arguments.get("attn_mask")
    if mask is not None and mask.dtype == torch.bool:
        arguments["attn_mask"] = mask & ~torch.eye(mask.shape[-2], mask.shape[-1], dtype=torch.bool)
    return arguments


MASKS = ["none", "right_padding", "padding_with_holes", "float_padding", "bool_attn_mask", "float_attn_mask",
         "per_head_attn_mask", "causal_hint", "causal_and_padding"]


def _assert_gradients_equal(mha: nn.MultiheadAttention, mixed: MixedMultiheadAttention) -> None:
    q, k, v = mha.in_proj_weight.grad.chunk(3)  # (3E, E) -> 3 x (E, E)
    for name, want, got in (("q_proj", q, mixed.q_proj.weight.grad), ("k_proj", k, mixed.k_proj.weight.grad),
                            ("v_proj", v, mixed.v_proj.weight.grad),
                            ("out_proj", mha.out_proj.weight.grad, mixed.out_proj.weight.grad),
                            ("in_proj_bias", mha.in_proj_bias.grad,
                             torch.cat([mixed.q_proj.bias.grad, mixed.k_proj.bias.grad, mixed.v_proj.bias.grad]))):
        torch.testing.assert_close(got, want, **TOL, msg=lambda m: f"{name}: {m}")


@pytest.mark.parametrize("implementation", ["fused", "reference"])
@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("masks", MASKS)
def test_all_global_heads_equal_torch_multihead_attention(masks, batch_first, implementation):
    mha, mixed = _twins(implementation, batch_first=batch_first)
    batch, length = 3, 6
    shape = (batch, length, E) if batch_first else (length, batch, E)
    x = torch.randn(shape, dtype=torch.float64, requires_grad=True)
    x_mixed = x.detach().clone().requires_grad_()
    arguments = _visible_everywhere(_masks(masks, batch, length, length))
    for average in (True, False):
        want, want_w = mha(x, x, x, **arguments, average_attn_weights=average)
        got, got_w = mixed(x_mixed, x_mixed, x_mixed, **arguments, average_attn_weights=average)
        torch.testing.assert_close(got, want, **TOL)
        torch.testing.assert_close(got_w, want_w, **TOL)
    want.square().sum().backward()
    got.square().sum().backward()
    torch.testing.assert_close(x_mixed.grad, x.grad, **TOL)
    _assert_gradients_equal(mha, mixed)


def test_cross_attention_with_other_key_and_value_widths_equals_torch():
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(E, H, kdim=10, vdim=12, batch_first=True, dtype=torch.float64)
    mixed = MixedMultiheadAttention.from_torch(mha)
    assert not mixed._qkv_same_embed_dim and (mixed.kdim, mixed.vdim) == (10, 12)
    query = torch.randn(2, 5, E, dtype=torch.float64)
    key, value = torch.randn(2, 7, 10, dtype=torch.float64), torch.randn(2, 7, 12, dtype=torch.float64)
    padding = _right_padding([7, 4], 7)
    want = mha(query, key, value, key_padding_mask=padding)
    got = mixed(query, key, value, key_padding_mask=padding)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, **TOL)


def test_unbatched_input_equals_torch():
    mha, mixed = _twins("fused")
    x = torch.randn(5, E, dtype=torch.float64)
    mask = torch.rand(5, 5, generator=torch.Generator().manual_seed(2)) < 0.3
    arguments = _visible_everywhere({"attn_mask": mask, "key_padding_mask": torch.tensor([False] * 4 + [True])})
    for a, b in zip(mixed(x, x, x, **arguments), mha(x, x, x, **arguments)):
        torch.testing.assert_close(a, b, **TOL)


def test_keyword_construction_takes_torch_arguments_and_defaults():
    module = MixedMultiheadAttention(embed_dim=E, num_heads=H, dropout=0.1, bias=False, batch_first=False,
                                     dtype=torch.float64, head_spec="GLFB", window=2)
    assert (module.embed_dim, module.num_heads, module.dropout, module.batch_first) == (E, H, 0.1, False)
    assert module._qkv_same_embed_dim and module.in_proj_bias is None and module.q_proj.bias is None
    assert module.q_proj.weight.dtype == torch.float64 and module.config.window == 2
    out, weights = module.eval()(torch.randn(6, 2, E, dtype=torch.float64))  # (T, B, E): torch's default layout
    assert out.shape == (6, 2, E) and weights.shape == (2, 6, 6)  # head-averaged weights by default, as torch
    assert MixedMultiheadAttention(E, H).batch_first is False  # torch's default


def test_config_construction_keeps_the_library_defaults():
    module = MixedMultiheadAttention(MixedAttentionConfig(E, H, head_spec="GLFB"))
    out, weights = module(torch.randn(2, 6, E))
    assert module.batch_first and out.shape == (2, 6, E) and weights is None
    assert module(torch.randn(2, 6, E), need_weights=True)[1].shape == (2, H, 6, 6)  # per head


def _encoder_layer(batch_first: bool) -> nn.TransformerEncoderLayer:
    torch.manual_seed(0)
    return nn.TransformerEncoderLayer(E, H, dim_feedforward=32, dropout=0.0, batch_first=batch_first,
                                      dtype=torch.float64)


@pytest.mark.parametrize("batch_first", [True, False])
def test_swapped_into_transformer_encoder_layer_equals_torch(batch_first):
    layer = _encoder_layer(batch_first)
    swapped = copy.deepcopy(layer)
    swapped.self_attn = MixedMultiheadAttention.from_torch(layer.self_attn)
    x = torch.randn((3, 6, E) if batch_first else (6, 3, E), dtype=torch.float64)
    padding = _right_padding([6, 4, 2], 6)
    want = layer(x, src_key_padding_mask=padding)
    got = swapped(x, src_key_padding_mask=padding)
    torch.testing.assert_close(got, want, **TOL)
    want.square().sum().backward()
    got.square().sum().backward()
    _assert_gradients_equal(layer.self_attn, swapped.self_attn)
    torch.testing.assert_close(swapped.linear1.weight.grad, layer.linear1.weight.grad, **TOL)
    with torch.no_grad():  # eval: torch's layer takes its fused fast path; the swapped one steps aside from it
        want, got = layer.eval()(x, src_key_padding_mask=padding), swapped.eval()(x, src_key_padding_mask=padding)
    real = ~padding if batch_first else ~padding.T  # the fast path leaves padding rows undefined
    torch.testing.assert_close(got[real], want[real], rtol=1e-7, atol=1e-7)


def test_swapped_into_a_built_transformer_encoder_takes_its_nested_tensor_path():
    encoder = nn.TransformerEncoder(_encoder_layer(True), num_layers=2, enable_nested_tensor=True)
    assert encoder.use_nested_tensor  # built around nn.MultiheadAttention, it will pass NestedTensors in eval mode
    swapped = copy.deepcopy(encoder)
    for layer in swapped.layers:
        layer.self_attn = MixedMultiheadAttention.from_torch(layer.self_attn)
    x, padding = torch.randn(3, 6, E, dtype=torch.float64), _right_padding([6, 4, 2], 6)
    with torch.no_grad():
        want = encoder.eval()(x, src_key_padding_mask=padding)
        got = swapped.eval()(x, src_key_padding_mask=padding)
    torch.testing.assert_close(got, want, rtol=1e-7, atol=1e-7)


@pytest.mark.parametrize("batch_first", [True, False])
def test_swapped_into_nn_transformer_equals_torch(batch_first):
    torch.manual_seed(0)
    model = nn.Transformer(E, H, num_encoder_layers=1, num_decoder_layers=2, dim_feedforward=32, dropout=0.0,
                           batch_first=batch_first, dtype=torch.float64)
    swapped = copy.deepcopy(model)
    for layer in swapped.encoder.layers:
        layer.self_attn = MixedMultiheadAttention.from_torch(layer.self_attn)
    for layer in swapped.decoder.layers:
        layer.self_attn = MixedMultiheadAttention.from_torch(layer.self_attn)
        layer.multihead_attn = MixedMultiheadAttention.from_torch(layer.multihead_attn)
    src, tgt = torch.randn(3, 7, E, dtype=torch.float64), torch.randn(3, 5, E, dtype=torch.float64)
    if not batch_first:
        src, tgt = src.transpose(0, 1), tgt.transpose(0, 1)
    causal = nn.Transformer.generate_square_subsequent_mask(5).isneginf()  # bool, as the padding masks
    arguments = dict(tgt_mask=causal, tgt_is_causal=True, src_key_padding_mask=_right_padding([7, 5, 3], 7),
                     memory_key_padding_mask=_right_padding([7, 5, 3], 7),
                     tgt_key_padding_mask=_right_padding([5, 5, 4], 5))
    want, got = model(src, tgt, **arguments), swapped(src, tgt, **arguments)
    torch.testing.assert_close(got, want, **TOL)
    want.square().sum().backward()
    got.square().sum().backward()
    _assert_gradients_equal(model.encoder.layers[0].self_attn, swapped.encoder.layers[0].self_attn)
    for mine, theirs in zip(swapped.decoder.layers, model.decoder.layers):
        _assert_gradients_equal(theirs.self_attn, mine.self_attn)
        _assert_gradients_equal(theirs.multihead_attn, mine.multihead_attn)


def test_glfb_encoder_layer_trains_a_step():
    layer = _encoder_layer(True).float()
    layer.self_attn = MixedMultiheadAttention.from_torch(layer.self_attn, head_spec="GLFB")
    assert "GLFB" in repr(layer.self_attn)
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.1)
    x, target = torch.randn(4, 9, E), torch.randn(4, 9, E)
    padding = _right_padding([9, 7, 5, 3], 9)
    losses = []
    for _ in range(3):
        optimizer.zero_grad()
        loss = (layer(x, src_key_padding_mask=padding) - target)[~padding].square().mean()
        loss.backward()
        assert layer.self_attn.q_proj.weight.grad.abs().sum() > 0
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]


def test_a_causal_mask_makes_global_heads_causal_and_other_heads_see_its_intersection():
    torch.manual_seed(0)
    module = MixedMultiheadAttention(E, H, batch_first=True, head_spec="GLFB", implementation="reference")
    x = torch.randn(2, 6, E)
    causal = nn.Transformer.generate_square_subsequent_mask(6)
    _, weights = module(x, attn_mask=causal, is_causal=True, average_attn_weights=False)  # (B, H, T, S)
    future = torch.ones(6, 6, dtype=torch.bool).triu(1)
    assert (weights[..., future] == 0).all()
    assert (weights[:, 0][..., ~future] > 0).all()  # the global head, now causal, sees every earlier key
    i, j = torch.arange(6).unsqueeze(1), torch.arange(6).unsqueeze(0)
    assert ((weights[:, 1] > 0) == (((i - j).abs() <= 1) & (j <= i))).all()  # local and causal
    assert ((weights[:, 2] > 0) == (i == j)).all()  # forward and causal: itself only


REFUSED = [
    (dict(add_bias_kv=True), ValueError, "add_bias_kv=True is not supported"),
    (dict(add_zero_attn=True), ValueError, "add_zero_attn=True is not supported"),
    (dict(num_heads=None), TypeError, "num_heads is required"),
]


@pytest.mark.parametrize("arguments, error, message", REFUSED)
def test_unsupported_constructor_arguments_are_refused(arguments, error, message):
    with pytest.raises(error, match=message):
        MixedMultiheadAttention(**{"embed_dim": E, "num_heads": H, **arguments})


def test_a_config_with_torch_arguments_is_refused():
    with pytest.raises(TypeError, match=r"either a MixedAttentionConfig or nn.MultiheadAttention's arguments, not both "
                                        r"\(got a config and batch_first=False\)"):
        MixedMultiheadAttention(MixedAttentionConfig(E, H), batch_first=False)


@pytest.mark.parametrize("arguments", [dict(add_bias_kv=True), dict(add_zero_attn=True)])
def test_from_torch_refuses_extra_keys(arguments):
    name = next(iter(arguments))
    with pytest.raises(ValueError, match=rf"from_torch: the module was built with {name}=True"):
        MixedMultiheadAttention.from_torch(nn.MultiheadAttention(E, H, **arguments))


FORWARD_REFUSED = [
    (dict(is_causal=True), ValueError, r"is_causal=True is a hint that attn_mask is the causal mask.*needs attn_mask"),
    (dict(is_causal=True, attn_mask=torch.zeros(5, 5)), ValueError, r"is_causal=True but attn_mask is not the causal"),
    (dict(attn_mask=torch.zeros(4, 5)), ValueError, r"attn_mask must have shape \(query_len, key_len\) = \(5, 5\)"),
    (dict(attn_mask=torch.zeros(5, 5, dtype=torch.int64)), TypeError, r"attn_mask must be a bool tensor"),
    (dict(key_padding_mask=torch.zeros(2, 5, dtype=torch.int64)), TypeError, r"key_padding_mask must be a bool"),
    (dict(key_padding_mask=torch.zeros(2, 4, dtype=torch.bool)), ValueError, r"key_padding_mask must have shape"),
    (dict(key_padding_mask=torch.zeros(2, 5, dtype=torch.bool), key_lengths=torch.tensor([5, 5])), ValueError,
     r"give key padding either as key_lengths or as key_padding_mask"),
]


@pytest.mark.parametrize("arguments, error, message", FORWARD_REFUSED)
def test_forward_arguments_that_cannot_be_honoured_are_refused(arguments, error, message):
    module = MixedMultiheadAttention(E, H, batch_first=True, head_spec="G")
    with pytest.raises(error, match=rf"^MixedMultiheadAttention: {message}"):
        module(torch.randn(2, 5, E), **arguments)
