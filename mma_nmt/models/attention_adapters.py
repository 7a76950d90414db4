"""Adapters that give the attention modules of ``mma_nmt.modules`` the interface of their place in a model
(see ``attention_factory``) and keep every incremental-decoding tensor batch-first in the layer's ``cache`` dict, so
``reorder_incremental_state`` (beam search) follows them with one ``index_select``.

- :class:`MultiHopEncoderSelfAttention`: encoder self-attention with the second hop (SPEC section 4);
- :class:`MultiLayerCrossAttention`: MLMHA over the top ``n`` encoder layers (SPEC section 3);
- :class:`GmmCrossAttentionAdapter`: Gaussian-mixture concentrated cross-attention (SPEC section 5);
- :class:`EncoderLayerAggregation`: the MLMHA paper's layer-aggregation baselines, as what cross-attention reads;
- :class:`FusedLuongAttention`: the LSTM decoder's multi-head Luong attention on the fused operator, with the
  interface and the state-dict layout of the plain-PyTorch :class:`~mma_nmt.models.luong.MultiHeadLuongAttention`.
"""

from __future__ import annotations

import torch
from torch import nn

from mma_nmt.models.config import LSTMConfig, TransformerConfig
from mma_nmt.models.incremental import EncoderOut
from mma_nmt.modules import (
    GmmAttentionConfig,
    GmmCrossAttention,
    IterativeFeatureCombination,
    LinearFeatureCombination,
    LuongAttentionConfig,
    LuongMemory,
    LuongMultiheadAttention,
    MultiHopAttentionConfig,
    MultiHopSelfAttention,
    MultiLayerAttentionConfig,
    MultiLayerMultiheadAttention,
    SourceFeatureCollector,
    TransparentAttention,
)


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

    Cache: the projected keys/values of the fused path (``cache["k"]``, ``cache["v"]``: lists of per-layer (B, S, E)
    projections, batch first), computed at the first step. The reference path recomputes them from ``encoder_out`` at each step (it is the check, not the fast
    path), which follows beam reordering because ``encoder_out`` is reordered too."""

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
        fused = self.attn.config.implementation == "fused"
        state = None
        if cache is not None and fused:
            state = {}
            if "k" in cache:
                state[self.attn._cache_key] = (cache["k"], cache["v"])
        features = None if state else self.collector(encoder_out.layer_states)
        out, weights = self.attn(x, features, key_lengths=encoder_out.lengths, need_weights=need_weights,
                                 incremental_state=state)
        if state is not None and "k" not in cache:
            cache["k"], cache["v"] = state[self.attn._cache_key]
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
        cached = cache is not None and "k" in cache
        out, weights = self.attn(x, None if cached else encoder_out.out,
                                 key_lengths=None if cached else encoder_out.lengths,
                                 need_weights=need_weights, incremental_state=cache)
        return out, None if weights is None else weights["gamma"]


class FusedLuongAttention(nn.Module):
    """:class:`~mma_nmt.modules.LuongMultiheadAttention` behind the interface of the plain-PyTorch
    ``MultiHeadLuongAttention``: ``precompute_keys(encoder_states (B, S, dh)) -> keys (B, h, S, dh)`` and
    ``forward(query (B, dh), keys, encoder_states, lengths) -> (a~ (B, d_sm), a- (B, d_fd), alpha (B, h, S))``.

    The state dict uses the reference layout (``score.weight``, ``w_softmax``, ``w_feed``), so checkpoints load into
    either implementation; :func:`luong_reference_to_module` is the (pure rearrangement) mapping."""

    def __init__(self, config: LSTMConfig, implementation: str = "fused"):
        super().__init__()
        self.hidden, self.heads = config.hidden_size, config.heads
        self.attn = LuongMultiheadAttention(LuongAttentionConfig(
            hidden_dim=config.hidden_size, num_heads=config.heads, softmax_dim=config.softmax_dim,
            feed_dim=config.feed_dim, implementation=implementation))
        self.register_state_dict_post_hook(_luong_state_dict_hook)
        self.register_load_state_dict_pre_hook(_luong_load_pre_hook)

    def precompute_keys(self, encoder_states: torch.Tensor) -> torch.Tensor:
        return self.attn.precompute(encoder_states).keys  # (B, h, S, dh)

    def forward(self, query: torch.Tensor, keys: torch.Tensor, encoder_states: torch.Tensor, lengths: torch.Tensor):
        a_softmax, a_feed, alpha = self.attn(query, LuongMemory(keys, encoder_states, lengths), need_weights=True)
        return a_softmax, a_feed, alpha


def luong_reference_to_module(score: torch.Tensor, w_softmax: torch.Tensor, w_feed: torch.Tensor, heads: int
                              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Reference (score (h*dh, dh), w_softmax (h, 2dh, sm/h), w_feed (h, 2dh, fd/h)) -> module (w_sc (h, dh, dh),
    w_context (h, sm/h + fd/h, dh), w_state (h, sm/h + fd/h, dh))."""
    dh = score.shape[1]
    w_sc = score.reshape(heads, dh, dh)
    joined = torch.cat([w_softmax, w_feed], dim=2).transpose(1, 2)  # (h, o, 2dh) acting on [c; h_t]
    return w_sc, joined[..., :dh].contiguous(), joined[..., dh:].contiguous()


def luong_module_to_reference(w_sc: torch.Tensor, w_context: torch.Tensor, w_state: torch.Tensor, softmax_dim: int
                              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Inverse of :func:`luong_reference_to_module`."""
    heads, dh, _ = w_sc.shape
    sm = softmax_dim // heads
    joined = torch.cat([w_context, w_state], dim=2).transpose(1, 2)  # (h, 2dh, o)
    return w_sc.reshape(heads * dh, dh), joined[..., :sm].contiguous(), joined[..., sm:].contiguous()


def _luong_state_dict_hook(module: FusedLuongAttention, state_dict, prefix, local_metadata):
    w_sc, w_context, w_state = (state_dict.pop(prefix + f"attn.{name}") for name in ("w_sc", "w_context", "w_state"))
    score, w_softmax, w_feed = luong_module_to_reference(w_sc, w_context, w_state, module.attn.config.softmax_dim)
    state_dict[prefix + "score.weight"], state_dict[prefix + "w_softmax"], state_dict[prefix + "w_feed"] = \
        score, w_softmax, w_feed


def _luong_load_pre_hook(module: FusedLuongAttention, state_dict, prefix, *args):
    names = [prefix + "score.weight", prefix + "w_softmax", prefix + "w_feed"]
    if all(name in state_dict for name in names):
        converted = luong_reference_to_module(*(state_dict.pop(name) for name in names), heads=module.heads)
        for name, value in zip(("w_sc", "w_context", "w_state"), converted):
            state_dict[prefix + "attn." + name] = value
