"""The head spec of a Hugging Face model, stored in its config so that ``save_pretrained`` / ``from_pretrained`` keep
it.

``set_head_spec(model, "GLFB", window=1, layers=None)`` writes ``config.mma_nmt_head_spec = {"head_spec": "GLFB",
"window": 1, "layers": None}`` (a plain dict: ``config.json`` stores it as it is) and switches the model's attention
implementation to ``"mma_nmt"``. ``layers=None`` means every encoder layer; otherwise a list of encoder layer indices
(0-based); encoder layers not listed, the decoder and cross-attention stay as the pretrained model had them.
"""

from __future__ import annotations

from dataclasses import dataclass

from mma_nmt.ops.head_spec import parse_head_spec

CONFIG_KEY = "mma_nmt_head_spec"
ATTENTION_NAME = "mma_nmt"

# config.model_type of the encoder-decoder models whose encoder self-attention takes head kinds: their attention
# modules route through transformers' AttentionInterface and add no position bias to the logits.
SUPPORTED_MODEL_TYPES = ("marian", "bart", "mbart", "m2m_100", "pegasus")


@dataclass(frozen=True)
class HeadSpec:
    """Mixed multi-head spec of a model's encoder self-attention (SPEC section 1)."""

    head_spec: str  # one letter per head kind (G, L, F, B), stretched to the head count the paper's way
    window: int = 1  # half-width w of local heads: key j visible iff |i - j| <= w
    layers: tuple[int, ...] | None = None  # encoder layers that take the spec; None = all

    def covers(self, layer_index: int | None) -> bool:
        return self.layers is None or layer_index in self.layers

    def to_dict(self) -> dict:
        return {"head_spec": self.head_spec, "window": self.window,
                "layers": None if self.layers is None else list(self.layers)}


def set_head_spec(model, head_spec: str, *, window: int = 1, layers=None) -> HeadSpec:
    """Gives ``model``'s encoder self-attention the head kinds ``head_spec`` (e.g. ``"GLFB"``; ``"G"`` keeps the
    pretrained attention) and switches it to ``attn_implementation="mma_nmt"`` (call :func:`mma_nmt.hf.register`
    first). Raises ``ValueError`` for a model type, spec, window or layer list that cannot be honoured."""
    config = model.config
    model_type = getattr(config, "model_type", None)
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise ValueError(f"mma_nmt.hf.set_head_spec: model type {model_type!r} is not supported; head kinds apply to "
                         f"the encoder self-attention of {', '.join(SUPPORTED_MODEL_TYPES)}")
    spec = _checked_spec(head_spec, window, layers, heads=config.encoder_attention_heads,
                         encoder_layers=config.encoder_layers)
    setattr(config, CONFIG_KEY, spec.to_dict())
    _tag_encoder_layers(model)
    if getattr(config, "_attn_implementation", None) != ATTENTION_NAME:
        model.set_attn_implementation(ATTENTION_NAME)
    return spec


def head_spec_of(config) -> HeadSpec | None:
    """The spec stored in ``config`` (checked again: ``config.json`` may have been edited by hand), or None."""
    stored = getattr(config, CONFIG_KEY, None)
    if stored is None:
        return None
    if not isinstance(stored, dict) or "head_spec" not in stored:
        raise ValueError(f"config.{CONFIG_KEY} must be a dict with the key 'head_spec' (as written by "
                         f"mma_nmt.hf.set_head_spec), got {stored!r}")
    return _checked_spec(stored["head_spec"], stored.get("window", 1), stored.get("layers"),
                         heads=config.encoder_attention_heads, encoder_layers=config.encoder_layers)


def _checked_spec(head_spec, window, layers, *, heads: int, encoder_layers: int) -> HeadSpec:
    where = f"config.{CONFIG_KEY}"
    if not isinstance(head_spec, str):
        raise ValueError(f"{where}: head_spec must be a string of the letters G, L, F, B, got {head_spec!r}")
    if "C" in head_spec.upper():
        raise ValueError(f"{where}: head_spec {head_spec!r}: C (causal) heads belong to decoder self-attention; "
                         "the encoder takes G, L, F, B")
    parse_head_spec(head_spec, heads)  # raises ValueError naming the spec and the head count
    if isinstance(window, bool) or not isinstance(window, int) or window < 0:
        raise ValueError(f"{where}: window must be an int >= 0, got {window!r}")
    if layers is not None:
        if isinstance(layers, (str, bytes)) or not all(isinstance(i, int) and not isinstance(i, bool) for i in layers):
            raise ValueError(f"{where}: layers must be None (all encoder layers) or a list of ints, got {layers!r}")
        bad = [i for i in layers if not 0 <= i < encoder_layers]
        if bad or not layers:
            raise ValueError(f"{where}: layers must be encoder layer indices in 0..{encoder_layers - 1}, "
                             f"got {layers!r}")
        layers = tuple(sorted(set(layers)))
    return HeadSpec(head_spec.upper(), window, layers)


def restore_head_spec(model) -> HeadSpec | None:
    """After ``from_pretrained``: marks the encoder layers for the spec stored in ``model.config`` and returns it (None
    when there is none). Needed only when the stored spec names ``layers``: an attention module of Marian, mBART,
    M2M100 or Pegasus does not know its layer index, and a spec for all layers needs none."""
    spec = head_spec_of(model.config)
    if spec is not None:
        _tag_encoder_layers(model)
    return spec


LAYER_TAG = "_mma_nmt_encoder_layer"


def _tag_encoder_layers(model) -> None:
    """Marks each encoder self-attention module with its layer index. Only BART's encoder gives its attention modules a
    ``layer_idx``; Marian, mBART, M2M100 and Pegasus do not, and the attention function reads this tag there."""
    encoder = model.get_encoder()
    for index, layer in enumerate(encoder.layers):
        setattr(layer.self_attn, LAYER_TAG, index)
