"""Which attention module goes where, chosen by name in the model config.

Every builder takes ``(config: TransformerConfig, layer: int)`` (0-based layer index) and returns a module with the
interface of its place:

- encoder self-attention: ``forward(x (B, S, E), *, key_lengths (B,), need_weights) -> (out (B, S, E), weights)``
  where weights are (B, H, S, S) or None;
- decoder cross-attention: ``forward(x (B, T, E), encoder_out: EncoderOut, *, cache: dict | None, need_weights)
  -> (out (B, T, E), weights (B, H, T, S) or None)``; ``cache`` holds batch-first tensors (see ``incremental``).

The multi-hop, MLMHA and GMM modules get this interface through the adapters of ``attention_adapters``
(layer selection by ``encoder.multihop_layers`` / ``decoder.gmm_layers`` is done here). MLMHA reads
``encoder_out.layer_states``; GMM reads ``encoder_out.lengths`` (the true source length J). :func:`pending` remains for
kinds whose module is not merged yet: it raises ``NotImplementedError`` naming the branch.

``implementation="torch"`` builds every place from ``nn.MultiheadAttention`` instead (``torch_attention``).
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from mma_nmt.models import torch_attention
from mma_nmt.models.attention_adapters import (
    EncoderLayerAggregation,
    GmmCrossAttentionAdapter,
    MultiHopEncoderSelfAttention,
    MultiLayerCrossAttention,
)
from mma_nmt.models.config import TransformerConfig
from mma_nmt.models.incremental import EncoderOut
from mma_nmt.modules import MixedAttentionConfig, MixedMultiheadAttention
from mma_nmt.modules.heads import merge_heads

Builder = Callable[[TransformerConfig, int], nn.Module]


def pending(kind: str, branch: str) -> Builder:
    """A builder for a kind whose module lives in another branch: raises when a model asks for it."""

    def build(config: TransformerConfig, layer: int) -> nn.Module:
        raise NotImplementedError(
            f"attention kind {kind!r} (layer {layer}) is implemented in branch {branch!r}, which is not merged yet"
        )

    return build


def mixed_attention_config(config: TransformerConfig, head_spec: str, window: int = 1) -> MixedAttentionConfig:
    return MixedAttentionConfig(embed_dim=config.d_model, num_heads=config.heads, head_spec=head_spec, window=window,
                                dropout=config.attention_dropout, implementation=config.implementation)


class CausalSelfAttention(nn.Module):
    """Decoder self-attention (head kind ``C``). With a cache, new keys/values are appended to the cached ones and the
    queries sit at ``query_offset = S - T``."""

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.attn = MixedMultiheadAttention(mixed_attention_config(config, "C"))

    def forward(self, x: torch.Tensor, *, cache: dict | None = None, need_weights: bool = False):
        a = self.attn
        q, k, v = a.project_self(x)  # (B, H, T, D) each
        if cache is not None:
            if "k" in cache:
                k = torch.cat([cache["k"], k], dim=2)  # (B, H, S, D)
                v = torch.cat([cache["v"], v], dim=2)
            cache["k"], cache["v"] = k, v
        out, weights = a.attend(q, k, v, None, need_weights=need_weights, query_offset=k.shape[2] - q.shape[2])
        return a.out_proj(merge_heads(out)), weights


class StandardCrossAttention(nn.Module):
    """Global multi-head attention over the top encoder states; keys and values are projected once per sentence."""

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.attn = MixedMultiheadAttention(mixed_attention_config(config, "G"))

    def forward(self, x: torch.Tensor, encoder_out: EncoderOut, *, cache: dict | None = None,
                need_weights: bool = False):
        a = self.attn
        if cache is not None and "k" in cache:
            k, v = cache["k"], cache["v"]
        else:
            k, v = a.project_memory(encoder_out.out)  # (B, H, S, D) each
            if cache is not None:
                cache["k"], cache["v"] = k, v
        q = a.split_heads(a.q_proj(x))  # (B, H, T, D)
        out, weights = a.attend(q, k, v, encoder_out.lengths, need_weights=need_weights, query_offset=0)
        return a.out_proj(merge_heads(out)), weights


def _standard_self(config: TransformerConfig, layer: int) -> nn.Module:
    return MixedMultiheadAttention(mixed_attention_config(config, "G"))


def _mma_self(config: TransformerConfig, layer: int) -> nn.Module:
    return MixedMultiheadAttention(mixed_attention_config(config, config.encoder.head_spec, config.encoder.window))


def _standard_cross(config: TransformerConfig, layer: int) -> nn.Module:
    return StandardCrossAttention(config)


def _multihop_module(config: TransformerConfig, layer: int) -> nn.Module:
    return MultiHopEncoderSelfAttention(config)


def _mlmha_module(config: TransformerConfig, layer: int) -> nn.Module:
    return MultiLayerCrossAttention(config)


def _gmm_module(config: TransformerConfig, layer: int) -> nn.Module:
    return GmmCrossAttentionAdapter(config, layer)


# Builders of the second-hop / multi-layer / GMM modules (adapters in ``attention_adapters``).
MULTIHOP_SELF: Builder = _multihop_module
MLMHA_CROSS: Builder = _mlmha_module
GMM_CROSS: Builder = _gmm_module


def _multihop_self(config: TransformerConfig, layer: int) -> nn.Module:
    """Second hop only in ``encoder.multihop_layers`` (SPEC section 4), standard attention elsewhere."""
    chosen = MULTIHOP_SELF if layer in config.encoder.multihop_layers else _standard_self
    return chosen(config, layer)


def _mlmha_cross(config: TransformerConfig, layer: int) -> nn.Module:
    """Every decoder layer reads the top ``decoder.mlmha_n`` encoder layers (SPEC section 3)."""
    return MLMHA_CROSS(config, layer)


def _gmm_cross(config: TransformerConfig, layer: int) -> nn.Module:
    """GMM only in ``decoder.gmm_layers`` (all when None), standard cross-attention elsewhere."""
    layers = config.decoder.gmm_layers
    chosen = GMM_CROSS if layers is None or layer in layers else _standard_cross
    return chosen(config, layer)


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
    if config.implementation == "torch":
        return torch_attention.build_encoder_self_attention(config, layer)
    return _lookup(ENCODER_SELF_ATTENTION, config.encoder.attention, "encoder self-")(config, layer)


def build_decoder_self_attention(config: TransformerConfig) -> nn.Module:
    if config.implementation == "torch":
        return torch_attention.TorchCausalSelfAttention(config)
    return CausalSelfAttention(config)


def build_cross_attention(config: TransformerConfig, layer: int) -> nn.Module:
    if config.implementation == "torch":
        return torch_attention.build_cross_attention(config, layer)
    return _lookup(CROSS_ATTENTION, config.decoder.cross_attention, "decoder cross-")(config, layer)


def build_layer_aggregation(config: TransformerConfig) -> nn.Module | None:
    """What cross-attention reads instead of the top encoder layer (``encoder.layer_aggregation``), None for
    ``"none"``; the aggregations replace the top layer, so they combine only with standard or GMM cross-attention."""
    if config.encoder.layer_aggregation == "none":
        return None
    if config.decoder.cross_attention == "mlmha":
        raise ValueError("encoder.layer_aggregation needs a cross-attention that reads one representation; "
                         "decoder.cross_attention = 'mlmha' reads the encoder layers itself")
    return EncoderLayerAggregation(config)
