"""Every model kind runs forward and backward under CPU bfloat16 autocast (``train.amp = "bf16"`` on the CPU): the
linear layers in bfloat16, the fused operators in float32, gradients of the float32 parameters finite and close to
float32's."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

from mma_nmt.models import build_model, preset
from nmt_fixtures import random_batch, tiny_transformer


def _transformer(encoder: dict | None = None, decoder: dict | None = None):
    config = tiny_transformer(attention_dropout=0.0)
    return replace(config, encoder=replace(config.encoder, **(encoder or {})),
                   decoder=replace(config.decoder, **(decoder or {})))


MODELS = {
    "standard": lambda: _transformer(),
    "mma": lambda: _transformer(encoder={"attention": "mma"}),
    "multihop": lambda: _transformer(encoder={"attention": "multihop", "multihop_layers": [0]}),
    "gmm": lambda: _transformer(decoder={"cross_attention": "gmm"}),
    "mlmha": lambda: _transformer(decoder={"cross_attention": "mlmha"}),
    "lstm": lambda: preset("lstm_tiny", src_vocab_size=37, tgt_vocab_size=41, dropout=0.0),
}


def _loss_and_gradients(model, batch, amp: bool):
    src, lengths, prev, target = batch
    model.zero_grad(set_to_none=True)
    context = torch.autocast("cpu", dtype=torch.bfloat16) if amp else torch.autocast("cpu", enabled=False)
    with context:
        logits = model(src, lengths, prev)  # (B, T, V)
    loss = F.cross_entropy(logits.float().flatten(0, 1), target.flatten())
    loss.backward()
    return logits.dtype, loss.item(), {name: p.grad.clone() for name, p in model.named_parameters()
                                       if p.grad is not None}


@pytest.mark.parametrize("kind", list(MODELS))
def test_model_trains_under_cpu_bf16_autocast(kind):
    torch.manual_seed(0)
    model = build_model(MODELS[kind]())
    batch = random_batch()
    dtype, loss, grads = _loss_and_gradients(model, batch, amp=True)
    _, loss32, grads32 = _loss_and_gradients(model, batch, amp=False)
    assert dtype == torch.bfloat16, "the output projection ran in bfloat16"
    assert loss == pytest.approx(loss32, abs=0.05)
    assert grads.keys() == grads32.keys() and grads
    for name, grad in grads.items():
        assert grad.dtype == torch.float32 and bool(torch.isfinite(grad).all()), name
    cosine = F.cosine_similarity(torch.cat([g.flatten() for g in grads.values()]),
                                 torch.cat([g.flatten() for g in grads32.values()]), dim=0)
    assert cosine > 0.98, f"{kind}: bfloat16 gradients point elsewhere than float32's (cosine {float(cosine):.3f})"
