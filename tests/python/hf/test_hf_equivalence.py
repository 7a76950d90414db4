"""mma_nmt's attention in Hugging Face models against eager attention: all-G equals eager, mixed heads equal eager with
the reference visibility added (forward, gradients and attention weights)."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

import torch  # noqa: E402
from hf_models import (BASELINE, ENCODER_LAYERS, MODEL_TYPES, copy_model, count_fused_calls, make_model,  # noqa: E402
                       padded_batch, real_rows, use_baseline_kinds)

import mma_nmt.hf  # noqa: E402


def _run(model, batch, **kwargs):
    """Loss, logits, the encoder output and the parameter gradients of one teacher-forced step."""
    model.zero_grad()
    out = model(**batch, **kwargs)
    out.loss.backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    return out, grads


def _assert_same(ours, theirs, batch, atol=1e-5):
    (out, grads), (ref, ref_grads) = ours, theirs
    torch.testing.assert_close(out.logits, ref.logits, atol=atol, rtol=1e-4)
    mask = batch["attention_mask"]
    torch.testing.assert_close(real_rows(mask, out.encoder_last_hidden_state),
                               real_rows(mask, ref.encoder_last_hidden_state), atol=atol, rtol=1e-4)
    assert grads.keys() == ref_grads.keys()
    for name in grads:
        torch.testing.assert_close(grads[name], ref_grads[name], atol=atol, rtol=1e-4, msg=name)


@pytest.mark.parametrize("model_type", ["marian", "bart"])
def test_all_global_heads_equal_eager(model_type, monkeypatch):
    eager = make_model(model_type, "eager")
    ours = copy_model(eager, "mma_nmt")
    mma_nmt.hf.set_head_spec(ours, "G")
    calls = count_fused_calls(monkeypatch)
    batch = padded_batch()
    _assert_same(_run(ours, batch), _run(eager, batch), batch)
    # The fused operator ran once per encoder layer, with the padded sentence's key length.
    assert len(calls) == ENCODER_LAYERS
    assert all(lengths.tolist() == [7, 4] for lengths in calls)


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_mixed_heads_equal_eager_with_reference_visibility(model_type, monkeypatch):
    baseline = make_model(model_type, BASELINE)
    use_baseline_kinds(baseline, "GLFB", window=1)
    ours = copy_model(baseline, "mma_nmt")
    mma_nmt.hf.set_head_spec(ours, "GLFB", window=1)
    calls = count_fused_calls(monkeypatch)
    self_attention = count_fused_calls(monkeypatch, "self_attention")
    batch = padded_batch()
    _assert_same(_run(ours, batch), _run(baseline, batch), batch)
    assert len(calls) == ENCODER_LAYERS
    # Encoder self-attention, said so: on CUDA's flash path its padding query rows may then come out 0 (SPEC).
    assert self_attention == [True] * ENCODER_LAYERS
    # The kinds matter: plain eager attention gives other logits.
    plain = copy_model(baseline, "eager")
    assert not torch.allclose(plain(**batch).logits, ours(**batch).logits, atol=1e-3)


@pytest.mark.parametrize("model_type", ["marian", "mbart"])
def test_spec_on_some_layers_leaves_the_others_global(model_type, monkeypatch):
    """layers=[1]: layer 1 gets the kinds, layer 0 stays as pretrained (mBART's attention has no layer_idx: the
    layers are known from the tags set_head_spec puts on them)."""
    baseline = make_model(model_type, BASELINE)
    use_baseline_kinds(baseline, "GLFB", window=2, layers=[1])
    ours = copy_model(baseline, "mma_nmt")
    mma_nmt.hf.set_head_spec(ours, "GLFB", window=2, layers=[1])
    calls = count_fused_calls(monkeypatch)
    batch = padded_batch()
    _assert_same(_run(ours, batch), _run(baseline, batch), batch)
    assert len(calls) == 1


@pytest.mark.parametrize("model_type", ["marian", "bart"])
def test_output_attentions_returns_the_weights(model_type):
    baseline = make_model(model_type, BASELINE)
    use_baseline_kinds(baseline, "GLFB")
    ours = copy_model(baseline, "mma_nmt")
    mma_nmt.hf.set_head_spec(ours, "GLFB")
    batch = padded_batch()
    with torch.no_grad():
        out = ours(**batch, output_attentions=True)
        ref = baseline(**batch, output_attentions=True)
    real_queries = batch["attention_mask"].bool()  # (B, S): compare the rows of real queries
    for name in ("encoder_attentions", "decoder_attentions", "cross_attentions"):
        weights, ref_weights = getattr(out, name), getattr(ref, name)
        assert len(weights) == len(ref_weights) == 2 and all(w is not None for w in weights), name
        for w, r in zip(weights, ref_weights):
            if name == "encoder_attentions":
                w, r = w.transpose(1, 2)[real_queries], r.transpose(1, 2)[real_queries]  # (real tokens, H, S)
            torch.testing.assert_close(w, r, atol=1e-5, rtol=1e-4, msg=name)
    # A forward head (kind F, head 2) sees no earlier key.
    assert out.encoder_attentions[0][:, 2].tril(-1).abs().max() == 0
