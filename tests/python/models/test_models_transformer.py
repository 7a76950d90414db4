"""Transformer: fused vs reference attention, incremental decoding, attention placement by config."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from mma_nmt.models import build_model, reorder_incremental_state
from mma_nmt.training.loss import label_smoothed_cross_entropy
from nmt_fixtures import random_batch, tiny_transformer


def _loss_and_grads(model, batch):
    src, lengths, prev, tgt = batch
    model.zero_grad()
    loss, _ = label_smoothed_cross_entropy(model(src, lengths, prev), tgt, epsilon=0.1, ignore_index=0)
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("attention,pre_norm", [("standard", False), ("mma", False), ("mma", True)])
def test_fused_and_reference_models_give_same_loss_and_gradients(attention, pre_norm):
    config = tiny_transformer(pre_norm=pre_norm)
    config.encoder.attention = attention
    torch.manual_seed(0)
    fused = build_model(config)
    reference = build_model(replace(config, implementation="reference"))
    reference.load_state_dict(fused.state_dict())
    batch = random_batch()
    loss_f, grads_f = _loss_and_grads(fused, batch)
    loss_r, grads_r = _loss_and_grads(reference, batch)
    torch.testing.assert_close(loss_f, loss_r, rtol=1e-5, atol=1e-5)
    assert grads_f.keys() == grads_r.keys() and len(grads_f) > 10
    for name in grads_f:
        torch.testing.assert_close(grads_f[name], grads_r[name], rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.parametrize("pre_norm", [False, True])
def test_incremental_decoding_equals_full_forward(pre_norm):
    config = tiny_transformer(pre_norm=pre_norm)
    config.encoder.attention = "mma"
    torch.manual_seed(1)
    model = build_model(config).eval()
    src, lengths, prev, _ = random_batch(batch=4)
    full = model(src, lengths, prev)  # (B, T, V)
    encoder_out, state = model.encode(src, lengths), {}
    steps = [model.decode(prev[:, : t + 1], encoder_out, state)[0] for t in range(prev.shape[1])]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-4, atol=1e-5)


def test_reordered_incremental_state_follows_the_rows():
    torch.manual_seed(2)
    model = build_model(tiny_transformer()).eval()
    src, lengths, prev, _ = random_batch(batch=3)
    order = torch.tensor([2, 0, 0])
    encoder_out, state = model.encode(src, lengths), {}
    for t in range(3):
        model.decode(prev[:, : t + 1], encoder_out, state)
    reorder_incremental_state(state, order)
    prev_r = prev.index_select(0, order)
    step, _ = model.decode(prev_r[:, :4], encoder_out.index_select(order), state)
    expected = model(src.index_select(0, order), lengths.index_select(0, order), prev_r[:, :4])[:, -1:]
    torch.testing.assert_close(step, expected, rtol=1e-4, atol=1e-5)


def test_local_heads_make_encoder_output_ignore_far_tokens():
    """With only local heads (window 1) and one layer, position 0's output cannot depend on token 5."""
    config = tiny_transformer(encoder=replace(tiny_transformer().encoder, attention="mma", head_spec="L", layers=1))
    torch.manual_seed(3)
    model = build_model(config).eval()
    src = torch.randint(4, 37, (1, 8))
    changed = src.clone()
    changed[0, 5] = 4 if src[0, 5] != 4 else 5
    lengths = torch.tensor([8])
    out_a, out_b = model.encode(src, lengths).out, model.encode(changed, lengths).out
    torch.testing.assert_close(out_a[0, :3], out_b[0, :3])
    assert not torch.allclose(out_a[0, 4:7], out_b[0, 4:7])


def test_encoder_without_positional_embedding_is_order_blind_with_global_heads():
    config = tiny_transformer()
    config.encoder.positional_embedding = False
    torch.manual_seed(4)
    model = build_model(config).eval()
    src = torch.tensor([[5, 6, 7, 8]])
    lengths = torch.tensor([4])
    out = model.encode(src, lengths).out
    flipped = model.encode(src.flip(1), lengths).out
    torch.testing.assert_close(out.flip(1), flipped, rtol=1e-5, atol=1e-5)


def test_unknown_attention_kind_is_a_clear_error():
    config = tiny_transformer()
    config.encoder.attention = "sparse"
    with pytest.raises(ValueError, match="unknown encoder self-attention 'sparse'"):
        build_model(config)


def test_shared_embeddings_and_tied_output_share_one_table():
    model = build_model(replace(tiny_transformer(), tgt_vocab_size=37, share_embeddings=True))
    assert model.src_embed.embedding is model.tgt_embed.embedding and model.output is None
