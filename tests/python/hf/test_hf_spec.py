"""set_head_spec: what it stores, what it refuses, and that save_pretrained / from_pretrained keep it."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

import torch  # noqa: E402
from hf_models import copy_model, count_fused_calls, make_model, padded_batch  # noqa: E402

import mma_nmt.hf  # noqa: E402


@pytest.mark.parametrize("model_type", ["marian", "bart"])
def test_spec_survives_save_and_load(model_type, tmp_path, monkeypatch):
    model = make_model(model_type, "eager")
    mma_nmt.hf.set_head_spec(model, "GLFB", window=2, layers=[1])
    assert model.config._attn_implementation == "mma_nmt"  # set_head_spec switched it
    batch = padded_batch()
    with torch.no_grad():
        expected = model(**batch).logits
    model.save_pretrained(tmp_path)

    loaded = type(model).from_pretrained(tmp_path, attn_implementation="mma_nmt").eval()
    assert mma_nmt.hf.restore_head_spec(loaded) == mma_nmt.hf.HeadSpec("GLFB", 2, (1,))
    calls = count_fused_calls(monkeypatch)
    with torch.no_grad():
        torch.testing.assert_close(loaded(**batch).logits, expected)
    assert len(calls) == 1  # layer 1 only


@pytest.mark.parametrize("model_type", ["marian", "mbart"])
def test_loaded_spec_for_some_layers_asks_to_restore_it(model_type, tmp_path):
    """Marian's and mBART's encoder attention has no layer_idx: a loaded model whose spec names layers says how to mark
    them, and a spec for all layers needs nothing."""
    model = make_model(model_type, "eager")
    mma_nmt.hf.set_head_spec(model, "GLFB", layers=[0])
    model.save_pretrained(tmp_path)
    loaded = type(model).from_pretrained(tmp_path, attn_implementation="mma_nmt").eval()
    with pytest.raises(ValueError, match=r"does not know its layer index; call mma_nmt.hf.restore_head_spec"):
        loaded(**padded_batch())
    mma_nmt.hf.restore_head_spec(loaded)
    with torch.no_grad():
        torch.testing.assert_close(loaded(**padded_batch()).logits, model(**padded_batch()).logits)

    mma_nmt.hf.set_head_spec(model, "GLFB")
    model.save_pretrained(tmp_path / "all")
    loaded = type(model).from_pretrained(tmp_path / "all", attn_implementation="mma_nmt").eval()
    with torch.no_grad():
        torch.testing.assert_close(loaded(**padded_batch()).logits, model(**padded_batch()).logits)


@pytest.mark.parametrize("spec, window, layers, message", [
    ("GLFX", 1, None, "letters"),
    ("GLB", 1, None, "neither equals nor divides"),
    ("GLFC", 1, None, "C \\(causal\\) heads belong to decoder"),
    ("GLFB", -1, None, "window must be an int >= 0"),
    ("GLFB", 1, [2], "encoder layer indices in 0..1"),
    ("GLFB", 1, "01", "list of ints"),
])
def test_set_head_spec_refuses_what_it_cannot_honour(spec, window, layers, message):
    model = make_model("marian", "eager")
    with pytest.raises(ValueError, match=message):
        mma_nmt.hf.set_head_spec(model, spec, window=window, layers=layers)
    assert not hasattr(model.config, mma_nmt.hf.CONFIG_KEY)


def test_set_head_spec_refuses_other_model_types():
    import transformers

    config = transformers.T5Config(vocab_size=40, d_model=16, d_kv=4, d_ff=32, num_layers=1, num_heads=4)
    with pytest.raises(ValueError, match="model type 't5' is not supported"):
        mma_nmt.hf.set_head_spec(transformers.T5ForConditionalGeneration(config), "GLFB")


def test_hand_edited_spec_in_config_is_checked():
    model = copy_model(make_model("marian", "eager"), "mma_nmt")
    model.config.mma_nmt_head_spec = {"head_spec": "GLF", "window": 1, "layers": None}  # 3 kinds for 4 heads
    with pytest.raises(ValueError, match="neither equals nor divides num_heads=4"):
        model(**padded_batch())


def test_importing_mma_nmt_does_not_import_transformers():
    import subprocess
    import sys

    code = "import sys, mma_nmt; print('transformers' in sys.modules, 'mma_nmt.hf' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]
