"""Tiny random Hugging Face encoder-decoder models and the eager baseline the mma_nmt attention is compared with.

Nothing is fetched: models are built from configs (set HF_HUB_OFFLINE=1 so a stray Hub call fails fast)."""

from __future__ import annotations

import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
import transformers  # noqa: E402
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS  # noqa: E402

import mma_nmt.hf  # noqa: E402
from mma_nmt.ops.head_spec import parse_head_spec  # noqa: E402
from mma_nmt.reference.attention import visibility_mask  # noqa: E402

PAD, EOS, START = 0, 1, 2
VOCAB = 40
HEADS = 4
ENCODER_LAYERS = 2
MODEL_TYPES = ("marian", "bart", "mbart", "m2m_100", "pegasus")
_CLASSES = {
    "marian": ("MarianConfig", "MarianMTModel"),
    "bart": ("BartConfig", "BartForConditionalGeneration"),
    "mbart": ("MBartConfig", "MBartForConditionalGeneration"),
    "m2m_100": ("M2M100Config", "M2M100ForConditionalGeneration"),
    "pegasus": ("PegasusConfig", "PegasusForConditionalGeneration"),
}

# The baseline: eager attention with SPEC section 1's visibility (from mma_nmt.reference) added to the encoder
# self-attention logits as an additive mask. Written apart from mma_nmt.hf.attention on purpose: it finds the encoder
# layers by walking the model, not from the attention call's arguments.
BASELINE = "eager_with_reference_kinds"


def make_model(model_type: str = "marian", attn_implementation: str = "eager", seed: int = 0, dropout: float = 0.0):
    mma_nmt.hf.register()
    config_class, model_class = (getattr(transformers, name) for name in _CLASSES[model_type])
    config = config_class(
        vocab_size=VOCAB, d_model=16, encoder_layers=ENCODER_LAYERS, decoder_layers=2, encoder_attention_heads=HEADS,
        decoder_attention_heads=HEADS, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=64,
        pad_token_id=PAD, eos_token_id=EOS, bos_token_id=START, decoder_start_token_id=START, forced_eos_token_id=None,
        dropout=dropout, attention_dropout=dropout, activation_dropout=0.0, scale_embedding=True,
        init_std=0.3)  # large enough weights that attention is far from uniform and head kinds change the output
    torch.manual_seed(seed)
    return model_class._from_config(config, attn_implementation=attn_implementation).eval()


def copy_model(model, attn_implementation: str):
    """A second model with the same weights and another attention implementation."""
    twin = make_model(model.config.model_type, attn_implementation)
    twin.load_state_dict(model.state_dict())
    return twin


def padded_batch():
    """Two sources (the second right-padded) and teacher-forced decoder inputs and labels."""
    source = torch.tensor([[5, 6, 7, 8, 9, 10, EOS], [11, 12, 13, EOS, PAD, PAD, PAD]])
    labels = torch.tensor([[14, 15, 16, EOS], [17, 18, EOS, -100]])
    decoder_input = torch.tensor([[START, 14, 15, 16], [START, 17, 18, EOS]])
    return {"input_ids": source, "attention_mask": (source != PAD).long(), "decoder_input_ids": decoder_input,
            "labels": labels}


def use_baseline_kinds(model, head_spec: str, window: int = 1, layers=None) -> None:
    """Makes ``model`` (loaded with attn_implementation=BASELINE) add the reference visibility of ``head_spec`` to the
    encoder self-attention of ``layers`` (None = all)."""
    for index, layer in enumerate(model.get_encoder().layers):
        if layers is None or index in layers:
            layer.self_attn._baseline_kinds = (parse_head_spec(head_spec, HEADS), window)


def _baseline_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    eager = sys.modules[type(module).__module__].eager_attention_forward
    kinds = getattr(module, "_baseline_kinds", None)
    if kinds is not None:
        head_kinds, window = kinds
        visible = visibility_mask(head_kinds, query.shape[2], key.shape[2], window=window)  # (1, H, T, S)
        kind_mask = torch.zeros(visible.shape, dtype=query.dtype).masked_fill(~visible, torch.finfo(query.dtype).min)
        attention_mask = kind_mask if attention_mask is None else attention_mask + kind_mask
    return eager(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)


def _register_baseline() -> None:
    transformers.AttentionInterface.register(BASELINE, _baseline_attention)
    try:
        from transformers.masking_utils import AttentionMaskInterface
    except ImportError:  # pragma: no cover - transformers < 4.53
        return
    AttentionMaskInterface.register(BASELINE, AttentionMaskInterface._global_mapping["eager"])


_register_baseline()
assert BASELINE in ALL_ATTENTION_FUNCTIONS


def real_rows(source_mask: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
    """The encoder outputs at real (not padding) source positions, flattened: (real tokens, d_model)."""
    return hidden[source_mask.bool()]


def count_fused_calls(monkeypatch, argument: str = "key_lengths") -> list:
    """Records ``argument`` (the key lengths, or another keyword) of every call of the fused operator made by
    mma_nmt.hf's attention function. Spies stack: a second call records a second argument of the same calls."""
    import mma_nmt.hf.attention as hf_attention

    calls = []
    fused = hf_attention.fused_attention

    def spy(*args, **kwargs):
        calls.append(kwargs.get(argument))
        return fused(*args, **kwargs)

    monkeypatch.setattr(hf_attention, "fused_attention", spy)
    return calls
