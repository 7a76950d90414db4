"""Which attention module goes where, chosen by name in the model config.

Every builder in the tables takes ``(config: TransformerConfig, layer: int)`` (0-based layer index) and returns a
module with the interface of its place:

- encoder self-attention: ``forward(x (B, S, E), *, key_lengths (B,), need_weights) -> (out (B, S, E), weights)``
  where weights are (B, H, S, S) or None;
- decoder self-attention: ``forward(x (B, T, E), *, cache: dict | None, need_weights) -> (out (B, T, E), weights)``;
- decoder cross-attention: ``forward(x (B, T, E), encoder_out: EncoderOut, *, cache: dict | None, need_weights)
  -> (out (B, T, E), weights (B, H, T, S) or None)``.

``cache`` is the layer's own dict of batch-first tensors (the contract is in ``attention_adapters``). The decoder
places and the multi-hop, MLMHA and GMM modules get their interface from the adapters of ``attention_adapters``;
layer selection (``encoder.multihop_layers``, ``decoder.gmm_layers``) is done here. MLMHA reads
``encoder_out.layer_states``; GMM reads ``encoder_out.lengths`` (the true source length J).

``implementation="torch"`` builds every place from ``nn.MultiheadAttention`` instead (``torch_attention``).
"""

from __future__ import annotations

from typing import Callable

from torch import nn

from mma_nmt.models import torch_attention
from mma_nmt.models.attention_adapters import (
    CausalSelfAttention,
    EncoderLayerAggregation,
    GmmCrossAttentionAdapter,
    MultiHopEncoderSelfAttention,
    MultiLayerCrossAttention,
    StandardCrossAttention,
    mixed_attention_config,
)
from mma_nmt.models.config import TransformerConfig
from mma_nmt.modules import MixedMultiheadAttention

Builder = Callable[[TransformerConfig, int], nn.Module]


def _standard_self(config: TransformerConfig, layer: int) -> nn.Module:
    return MixedMultiheadAttention(mixed_attention_config(config, "G"))


def _mma_self(config: TransformerConfig, layer: int) -> nn.Module:
    return MixedMultiheadAttention(mixed_attention_config(config, config.encoder.head_spec, config.encoder.window))


def _multihop_self(config: TransformerConfig, layer: int) -> nn.Module:
    """Second hop only in ``encoder.multihop_layers`` (SPEC section 4), standard attention elsewhere."""
    if layer in config.encoder.multihop_layers:
        return MultiHopEncoderSelfAttention(config)
    return _standard_self(config, layer)


def _standard_cross(config: TransformerConfig, layer: int) -> nn.Module:
    return StandardCrossAttention(config)


def _mlmha_cross(config: TransformerConfig, layer: int) -> nn.Module:
    """Every decoder layer reads the top ``decoder.mlmha_n`` encoder layers (SPEC section 3)."""
    return MultiLayerCrossAttention(config)


def _gmm_cross(config: TransformerConfig, layer: int) -> nn.Module:
    """GMM only in ``decoder.gmm_layers`` (all when None), standard cross-attention elsewhere."""
    if config.decoder.gmm_layers is None or layer in config.decoder.gmm_layers:
        return GmmCrossAttentionAdapter(config, layer)
    return StandardCrossAttention(config)


ENCODER_SELF_ATTENTION: dict[str, Builder] = {
    "standard": _standard_self,
    "mma": _mma_self,
    "multihop": _multihop_self,
}
CROSS_ATTENTION: dict[str, Builder] = {
    "standard": _standard_cross,
    "mlmha": _mlmha_cross,
    "gmm": _gmm_cross,
}


def _lookup(table: dict, kind: str, place: str):
    if kind not in table:
        raise ValueError(f"unknown {place}attention {kind!r}; known: {sorted(table)}")
    return table[kind]


def build_encoder_self_attention(config: TransformerConfig, layer: int) -> nn.Module:
    """Self-attention of encoder layer ``layer`` (0-based): ``encoder.attention``, or ``nn.MultiheadAttention``."""
    if config.implementation == "torch":
        return torch_attention.build_encoder_self_attention(config, layer)
    return _lookup(ENCODER_SELF_ATTENTION, config.encoder.attention, "encoder self-")(config, layer)


def build_decoder_self_attention(config: TransformerConfig) -> nn.Module:
    """Causal self-attention of a decoder layer, with the incremental cache."""
    if config.implementation == "torch":
        return torch_attention.TorchCausalSelfAttention(config)
    return CausalSelfAttention(config)


def build_cross_attention(config: TransformerConfig, layer: int) -> nn.Module:
    """Cross-attention of decoder layer ``layer`` (0-based): ``decoder.cross_attention``, or nn.MultiheadAttention."""
    if config.implementation == "torch":
        return torch_attention.build_cross_attention(config, layer)
    return _lookup(CROSS_ATTENTION, config.decoder.cross_attention, "decoder cross-")(config, layer)


def reads_lower_layers(config: TransformerConfig) -> bool:
    """Whether the decoder reads encoder layers below the top one (MLMHA cross-attention or a layer aggregation)."""
    return config.decoder.cross_attention == "mlmha" or config.encoder.layer_aggregation != "none"


def build_layer_aggregation(config: TransformerConfig) -> nn.Module | None:
    """What cross-attention reads instead of the top encoder layer (``encoder.layer_aggregation``), None for
    ``"none"``; the aggregations replace the top layer, so they combine only with standard or GMM cross-attention."""
    if config.encoder.layer_aggregation == "none":
        return None
    if config.decoder.cross_attention == "mlmha":
        raise ValueError("encoder.layer_aggregation needs a cross-attention that reads one representation; "
                         "decoder.cross_attention = 'mlmha' reads the encoder layers itself")
    return EncoderLayerAggregation(config)
