"""Adapters that give the attention modules of ``mma_nmt.modules`` the interface of their place in a model
(see ``attention_factory``):

- :class:`CausalSelfAttention`: decoder self-attention (``MixedMultiheadAttention``, head kind ``C``);
- :class:`StandardCrossAttention`: global multi-head cross-attention over the encoder output;
- :class:`MultiHopEncoderSelfAttention`: encoder self-attention with the second hop (SPEC section 4);
- :class:`MultiLayerCrossAttention`: MLMHA over the top ``n`` encoder layers (SPEC section 3);
- :class:`GmmCrossAttentionAdapter`: Gaussian-mixture concentrated cross-attention (SPEC section 5);
- :class:`EncoderLayerAggregation`: the MLMHA paper's layer-aggregation baselines, as what cross-attention reads.

Incremental cache, the same for every decoder place: ``forward(..., cache: dict | None)`` gets the layer's own dict
(``incremental.module_cache``), which holds only batch-first tensors (or lists of them; plain ints are left alone), so
``reorder_incremental_state`` (beam search) follows them with one ``index_select``. The module that owns the dict
fills and reads its entries itself: an adapter hands the dict over and never looks inside; where it would compute
the module's input from the encoder output (MLMHA's collected layers), it first asks the module's
``has_cached_memory(cache)``.
"""

from __future__ import annotations

import torch
from torch import nn

from mma_nmt.models.config import TransformerConfig
from mma_nmt.models.incremental import EncoderOut
from mma_nmt.modules import (
    GmmAttentionConfig,
    GmmCrossAttention,
    IterativeFeatureCombination,
    LinearFeatureCombination,
    MixedAttentionConfig,
    MixedMultiheadAttention,
    MultiHopAttentionConfig,
    MultiHopSelfAttention,
    MultiLayerAttentionConfig,
    MultiLayerMultiheadAttention,
    SourceFeatureCollector,
    TransparentAttention,
)
from mma_nmt.modules.heads import merge_heads


def mixed_attention_config(config: TransformerConfig, head_spec: str, window: int = 1) -> MixedAttentionConfig:
    """The ``MixedMultiheadAttention`` config of a Transformer place with head kinds ``head_spec``."""
    return MixedAttentionConfig(embed_dim=config.d_model, num_heads=config.heads, head_spec=head_spec, window=window,
                                dropout=config.attention_dropout, implementation=config.implementation)


class CausalSelfAttention(nn.Module):
    """Decoder self-attention (head kind ``C``): ``forward(x (B, T, E), *, cache, need_weights) -> (out (B, T, E),
    weights (B, H, T, S) or None)``. Cache: ``cache["k"]``, ``cache["v"]`` (B, H, S, D), the keys/values so far; new
    ones are appended and the queries sit at ``query_offset = S - T``."""

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
    """Global multi-head attention over ``encoder_out.out``: ``forward(x (B, T, E), encoder_out, *, cache,
    need_weights) -> (out (B, T, E), weights (B, H, T, S) or None)``. Cache: the keys/values ``cache["k"]``,
    ``cache["v"]`` (B, H, S, D), projected once per sentence."""

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


class MultiHopEncoderSelfAttention(nn.Module):
    """``forward(x (B, S, E), *, key_lengths (B,), need_weights) -> (out (B, S, E), first-hop weights (B, H, S, S)
    or None)``. The head gate of the second hop (B, S, H) is handed out in record mode
    (:func:`mma_nmt.models.recording.record_attention`)."""

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.attn = MultiHopSelfAttention(MultiHopAttentionConfig(
            embed_dim=config.d_model, num_heads=config.heads, hop_dim=config.encoder.multihop_hidden,
            dropout=config.attention_dropout, implementation=config.implementation))

    def forward(self, x: torch.Tensor, *, key_lengths: torch.Tensor | None = None, need_weights: bool = False):
        out, weights = self.attn(x, key_lengths=key_lengths, need_weights=need_weights)
        return out, None if weights is None else weights.attention


class MultiLayerCrossAttention(nn.Module):
    """MLMHA cross-attention: collects the top ``n`` encoder layers from ``encoder_out.layer_states`` (each with its
    own LayerNorm) and attends over them with variant ``decoder.mlmha_variant``.

    Weights: (B, H, T, S) for joint weights (M-0j); for layer-specific weights (M-1j) the mean over the n layers,
    also (B, H, T, S) (record mode hands out the per-layer (B, n, H, T, S) weights, see ``recording``).

    Cache: the module's own (the projected keys/values of the fused path, lists of per-layer (B, S, E) projections,
    computed at the first step); the features are collected only while it has none. The reference path recomputes
    them from ``encoder_out`` at each step (it is the check, not the fast path), which follows beam reordering because
    ``encoder_out`` is reordered too."""

    def __init__(self, config: TransformerConfig):
        super().__init__()
        layers = config.encoder.layers
        n = layers if config.decoder.mlmha_n is None else config.decoder.mlmha_n
        self.collector = SourceFeatureCollector(config.d_model, layers, n)
        self.attn = MultiLayerMultiheadAttention(MultiLayerAttentionConfig.from_variant(
            config.decoder.mlmha_variant, embed_dim=config.d_model, num_heads=config.heads, num_layers=n,
            implementation=config.implementation))

    def forward(self, x: torch.Tensor, encoder_out: EncoderOut, *, cache: dict | None = None,
                need_weights: bool = False):
        features = None if self.attn.has_cached_memory(cache) else self.collector(encoder_out.layer_states)
        out, weights = self.attn(x, features, key_lengths=encoder_out.lengths, need_weights=need_weights, cache=cache)
        if weights is not None and weights.dim() == 5:  # (B, n, H, T, S): layer-specific weights
            weights = weights.mean(dim=1)
        return out, weights


class EncoderLayerAggregation(nn.Module):
    """``encoder.layer_aggregation`` (MLMHA paper baselines): ``forward(embedded (B, S, E), layer_states [L x (B, S,
    E)], bottom first)`` returns what the decoder's cross-attention reads: one joint representation (B, S, E) for every
    decoder layer (``"linear"``: ``LayerNorm(sum_l W_l h_l + b)``; ``"iterative"``: layers merged bottom-up, FFN size
    ``ffn_dim``), or one per decoder layer stacked as (B, M, S, E) (``"transparent"``: softmax-weighted sums of the
    embeddings and the L layers)."""

    def __init__(self, config: TransformerConfig):
        super().__init__()
        kind, layers, width = config.encoder.layer_aggregation, config.encoder.layers, config.d_model
        if kind == "linear":
            self.combine = LinearFeatureCombination(width, layers)
        elif kind == "iterative":
            self.combine = IterativeFeatureCombination(width, layers, config.ffn_dim)
        elif kind == "transparent":
            self.combine = TransparentAttention(layers, config.decoder.layers)
        else:
            raise ValueError(f"unknown encoder.layer_aggregation {kind!r}; known: none, linear, iterative, "
                             f"transparent")
        self.per_decoder_layer = kind == "transparent"

    def forward(self, embedded: torch.Tensor, layer_states: list[torch.Tensor]) -> torch.Tensor:
        if self.per_decoder_layer:
            return torch.stack(self.combine([embedded, *layer_states]), dim=1)  # M x (B, S, E) -> (B, M, S, E)
        return self.combine(layer_states)


# decoder.gmm_variant -> GmmAttentionConfig fields (paper Table 2 rows and ablations, see gmm_cross_attention.py). The
# variants that set the mixture's normalisation are named as it (mma_nmt.ops.gmm_normalization); stored configs with
# the names of earlier versions are read through models.config.upgrade_stored_model_config.
GMM_VARIANTS: dict[str, dict] = {
    "approximate": {"normalization": "approximate"},  # the paper's method
    "strict": {"normalization": "strict"},  # +Norm.
    "unnormalised": {"normalization": "unnormalised"},  # synthesis network
    "hard": {"attention": "hard_coded"},
    "localness": {"attention": "localness"},
    "mixture": {"attention": "mixture"},
    "dot": {"attention": "dot"},
    "average_gate": {"gate": "average"},
    "share_mean": {"share_mean": True},
    "share_variance": {"share_variance": True},
    "share_weight": {"share_weight": True},
}


def gmm_attention_config(config: TransformerConfig) -> GmmAttentionConfig:
    variant = config.decoder.gmm_variant
    if variant not in GMM_VARIANTS:
        raise ValueError(f"unknown decoder.gmm_variant {variant!r}; known: {sorted(GMM_VARIANTS)}")
    return GmmAttentionConfig(embed_dim=config.d_model, num_heads=config.heads,
                              num_components=config.decoder.gmm_components, implementation=config.implementation,
                              **GMM_VARIANTS[variant])


class GmmCrossAttentionAdapter(nn.Module):
    """GMM cross-attention reading ``encoder_out.out`` and the true source lengths ``encoder_out.lengths``. Returns
    the final weights ``gamma`` (B, H, T, S); record mode hands out all of them (alpha, beta, gamma, the gate and the
    mixture components, see ``recording``).

    Cache: the module's own state (projected keys/values, source lengths, previous means of the unnormalised
    (synthesis network) variant: batch-first tensors; the target step: an int, which beam reordering leaves
    alone)."""

    def __init__(self, config: TransformerConfig, layer: int):
        super().__init__()
        self.attn = GmmCrossAttention(gmm_attention_config(config), layer_index=layer)

    def forward(self, x: torch.Tensor, encoder_out: EncoderOut, *, cache: dict | None = None,
                need_weights: bool = False):
        out, weights = self.attn(x, encoder_out.out, key_lengths=encoder_out.lengths, need_weights=need_weights,
                                 cache=cache)  # with a warm cache the module reads neither
        return out, None if weights is None else weights["gamma"]

