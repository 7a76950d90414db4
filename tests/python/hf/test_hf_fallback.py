"""What does not take the head kinds: masks with holes, decoder self-attention and cross-attention."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

import torch  # noqa: E402
from hf_models import BASELINE, ENCODER_LAYERS, copy_model, count_fused_calls, make_model, padded_batch  # noqa: E402
from hf_models import use_baseline_kinds  # noqa: E402

import mma_nmt.hf  # noqa: E402
from mma_nmt.hf.masks import right_padding_lengths  # noqa: E402


def _with_hole(batch):
    """The first source gets a hidden token in the middle (position 2): a mask the fused operator cannot take."""
    batch = dict(batch)
    mask = batch["attention_mask"].clone()
    mask[0, 2] = 0
    batch["attention_mask"] = mask
    return batch


@pytest.mark.parametrize("model_type", ["marian", "bart"])
def test_mask_with_holes_gives_sdpa_result(model_type, monkeypatch):
    sdpa = make_model(model_type, "sdpa")
    ours = copy_model(sdpa, "mma_nmt")
    mma_nmt.hf.set_head_spec(ours, "G")
    calls = count_fused_calls(monkeypatch)
    batch = _with_hole(padded_batch())
    with torch.no_grad():
        torch.testing.assert_close(ours(**batch).logits, sdpa(**batch).logits, atol=1e-5, rtol=1e-4)
        assert calls == []  # the operator was not given a mask it cannot express
        # and the hole is honoured: hiding another token changes the result
        assert not torch.allclose(ours(**batch).logits, ours(**padded_batch()).logits, atol=1e-3)


def test_mask_with_holes_keeps_the_head_kinds():
    """A GLFB layer given a mask with holes still applies the kinds (in plain PyTorch), never silently all-G."""
    baseline = make_model("marian", BASELINE)
    use_baseline_kinds(baseline, "GLFB")
    ours = copy_model(baseline, "mma_nmt")
    mma_nmt.hf.set_head_spec(ours, "GLFB")
    batch = _with_hole(padded_batch())
    with torch.no_grad():
        torch.testing.assert_close(ours(**batch).logits, baseline(**batch).logits, atol=1e-5, rtol=1e-4)


def test_decoder_and_cross_attention_are_not_changed(monkeypatch):
    """Only the encoder's self-attention runs the operator (once per encoder layer); the decoder gives sdpa's result
    for the same encoder output."""
    sdpa = make_model("marian", "sdpa")
    ours = copy_model(sdpa, "mma_nmt")
    mma_nmt.hf.set_head_spec(ours, "GLFB")
    calls = count_fused_calls(monkeypatch)
    batch = padded_batch()
    with torch.no_grad():
        encoded = ours.get_encoder()(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
        assert len(calls) == ENCODER_LAYERS
        decode = dict(encoder_outputs=encoded, attention_mask=batch["attention_mask"],
                      decoder_input_ids=batch["decoder_input_ids"])
        torch.testing.assert_close(ours(**decode).logits, sdpa(**decode).logits, atol=1e-5, rtol=1e-4)
    assert len(calls) == ENCODER_LAYERS


def test_model_without_spec_is_sdpa(monkeypatch):
    sdpa = make_model("bart", "sdpa")
    ours = copy_model(sdpa, "mma_nmt")
    calls = count_fused_calls(monkeypatch)
    batch = padded_batch()
    with torch.no_grad():
        torch.testing.assert_close(ours(**batch).logits, sdpa(**batch).logits, atol=1e-5, rtol=1e-4)
    assert calls == []


def test_masks_read_back_as_right_padding_lengths():
    lengths = torch.tensor([3, 5])
    keys = torch.arange(5).view(1, -1) < lengths.view(-1, 1)  # (B, S)
    bool_mask = keys.view(2, 1, 1, 5).expand(2, 1, 4, 5)
    additive = torch.zeros(2, 1, 4, 5).masked_fill(~bool_mask, torch.finfo(torch.float32).min)
    for mask in (bool_mask, additive):
        padding = right_padding_lengths(mask, 2, 4, 5)
        assert padding.right_padding and padding.lengths.tolist() == [3, 5]
    assert right_padding_lengths(None, 2, 4, 5) == (True, None)
    full = torch.ones(2, 1, 4, 5, dtype=torch.bool)
    assert right_padding_lengths(full, 2, 4, 5) == (True, None)
    holes = bool_mask.clone()
    holes[1, 0, :, 1] = False
    assert not right_padding_lengths(holes, 2, 4, 5).right_padding
    causal = torch.ones(4, 5, dtype=torch.bool).tril().view(1, 1, 4, 5)
    assert not right_padding_lengths(causal, 2, 4, 5).right_padding
    bias = additive.clone()
    bias[0, 0, 0, 0] = -0.5  # a position bias, not a mask
    assert not right_padding_lengths(bias, 2, 4, 5).right_padding
