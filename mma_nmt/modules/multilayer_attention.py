"""Multi-layer multi-head attention (MLMHA, SPEC section 3): decoder cross-attention over the outputs of the top ``n``
encoder layers, each layer with its own query/key/value projections. Variants ``M-ij``: ``U0 = i`` (0 joint weights
``softmax(sum_i a_i)``, 1 layer-specific weights), ``U1 = j`` (0 concatenated contexts, 1 summed contexts).

The fused path is ``mma_nmt::multilayer_attention``, which reads the n per-layer projections where they are. Joint
weights: ``sum_i q_i k_i^T = [q_1..q_n][k_1..k_n]^T``, so each head is ordinary attention on head size ``n*D`` with
scale ``1/sqrt(D)``; values are summed over layers first when contexts are summed (``p sum_i v_i = sum_i p v_i``).
Layer-specific weights: the ``n`` layers are ``n*H`` independent heads. The CPU kernel gathers each head's rows into
cache; arranging the projections into one ``(B, H, L, n*D)`` tensor instead (the previous design) cost 41-51% of the
attention core. benchmarks/bench_multilayer_attention.py measures the speed against the reference.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Sequence

import torch
from torch import nn

from mma_nmt.config_io import check_choices
from mma_nmt.config_types import Implementation
from mma_nmt.modules.heads import init_attention_projections, split_heads
from mma_nmt.ops.multilayer_attention import multilayer_attention
from mma_nmt.ops.padding import resolve_key_lengths
from mma_nmt.reference.multilayer_attention import multilayer_attention_reference

# MLMHA paper models "M-ij": U0 = i (0 joint, 1 layer-specific weights), U1 = j (0 concatenated, 1 summed contexts)
MlmhaVariant = Literal["M-00", "M-01", "M-10", "M-11"]
_VARIANTS = {"M-00": (False, False), "M-01": (False, True), "M-10": (True, False), "M-11": (True, True)}


@dataclass
class MultiLayerAttentionConfig:
    embed_dim: int
    num_heads: int
    num_layers: int = 6  # n: how many encoder layers (the top ones) are read; 1 is ordinary cross-attention
    layer_specific: bool = False  # U0
    sum_contexts: bool = False  # U1
    bias: bool = True
    implementation: Implementation = "fused"  # or "reference": SPEC's formula, one logit matrix per layer

    def __post_init__(self):
        check_choices("", self)

    @classmethod
    def from_variant(cls, variant: MlmhaVariant, **kwargs) -> "MultiLayerAttentionConfig":
        """Config of paper model ``"M-00"``, ``"M-01"``, ``"M-10"`` or ``"M-11"``."""
        if variant not in _VARIANTS:
            raise ValueError(f"variant must be one of {sorted(_VARIANTS)}, got {variant!r}")
        layer_specific, sum_contexts = _VARIANTS[variant]
        return cls(layer_specific=layer_specific, sum_contexts=sum_contexts, **kwargs)


class SourceFeatureCollector(nn.Module):
    """Collects the top ``num_collected`` of ``num_encoder_layers`` encoder outputs, each with its own LayerNorm.

    ``forward(layer_outputs)`` takes all L outputs (B, S, E), bottom first, and returns the list ``[f_1 .. f_n]``.
    ``masked_layer`` (1-based encoder layer, or None) replaces that layer's collected output with zeros: the paper's
    layer-masking ablation, meant for test time.
    """

    def __init__(self, embed_dim: int, num_encoder_layers: int, num_collected: int):
        super().__init__()
        if not 1 <= num_collected <= num_encoder_layers:
            raise ValueError(
                f"num_collected must lie in [1, num_encoder_layers={num_encoder_layers}], got {num_collected}")
        self.num_encoder_layers = num_encoder_layers
        self.first_layer = num_encoder_layers - num_collected + 1  # 1-based encoder layer of f_1
        self.norms = nn.ModuleList(nn.LayerNorm(embed_dim) for _ in range(num_collected))
        self.masked_layer: int | None = None

    def forward(self, layer_outputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        if len(layer_outputs) != self.num_encoder_layers:
            raise ValueError(
                f"layer_outputs must hold all {self.num_encoder_layers} encoder layers, got {len(layer_outputs)}")
        if self.masked_layer is not None and not 1 <= self.masked_layer <= self.num_encoder_layers:
            raise ValueError(
                f"masked_layer must lie in [1, {self.num_encoder_layers}] or be None, got {self.masked_layer}")
        collected = []
        for index, norm in enumerate(self.norms):
            layer = self.first_layer + index
            f = norm(layer_outputs[layer - 1])
            collected.append(torch.zeros_like(f) if layer == self.masked_layer else f)
        return collected


class MultiLayerMultiheadAttention(nn.Module):
    """MLMHA sublayer. ``forward(query (B, T, E), features [n x (B, S, E)], *, key_padding_mask (B, S) or key_lengths
    (B,), need_weights=False, cache=None)`` returns ``(output (B, T, E), weights or None)``; weights are
    (B, H, T, S) for joint weights, (B, n, H, T, S) for layer-specific ones.

    Incremental decoding: pass the same dict as ``cache`` at every step (this module's own: it fills ``cache["k"]``
    and ``cache["v"]``, lists of batch-first (B, S, E) projections, so ``mma_nmt.models.reorder_incremental_state``
    follows beam reordering). The fused path projects the features at the first step and reuses the projections;
    once :meth:`has_cached_memory` is true, ``features`` is not read again (it may be None). The reference path (the
    check, not the fast path) reads ``features`` at every step and caches nothing.
    """

    def __init__(self, config: MultiLayerAttentionConfig):
        super().__init__()
        if config.embed_dim % config.num_heads != 0:
            raise ValueError(f"embed_dim={config.embed_dim} must be divisible by num_heads={config.num_heads}")
        if config.num_layers < 1:
            raise ValueError(f"num_layers must be >= 1, got {config.num_layers}")
        self.config = config
        self.head_dim = config.embed_dim // config.num_heads
        e, n = config.embed_dim, config.num_layers

        def linears():
            return nn.ModuleList(nn.Linear(e, e, bias=config.bias) for _ in range(n))

        self.q_projs, self.k_projs, self.v_projs = linears(), linears(), linears()
        self.out_proj = nn.Linear(e if config.sum_contexts else n * e, e, bias=config.bias)
        self.reset_parameters()

    @staticmethod
    def has_cached_memory(cache: dict | None) -> bool:
        """Whether ``cache`` holds the projected keys and values of the encoder features (then not read again)."""
        return cache is not None and "k" in cache

    def reset_parameters(self) -> None:
        init_attention_projections((*self.q_projs, *self.k_projs, *self.v_projs), self.out_proj)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        return split_heads(x, self.config.num_heads)  # (B, L, E) -> (B, H, L, D), a view

    def project_memory(self, features: Sequence[torch.Tensor]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Keys and values of the fused path from ``features`` (n x (B, S, E)): n per-layer key projections, and n
        value projections, or their sum (one tensor) for joint weights with summed contexts."""
        c = self.config
        keys = [proj(f) for proj, f in zip(self.k_projs, features)]
        values = [proj(f) for proj, f in zip(self.v_projs, features)]
        if not c.layer_specific and c.sum_contexts:
            values = [sum(values)]  # p (sum_i v_i) = sum_i p v_i
        return keys, values

    def forward(self, query: torch.Tensor, features: Sequence[torch.Tensor], *,
                key_padding_mask: torch.Tensor | None = None, key_lengths: torch.Tensor | None = None,
                need_weights: bool = False, cache: dict | None = None
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        c = self.config
        cached = self.has_cached_memory(cache)
        self._check_inputs(query, None if cached else features)
        key_len = (cache["k"][0] if cached else features[0]).shape[1]
        lengths = resolve_key_lengths(key_lengths, key_padding_mask, query.device, keys=(query.shape[0], key_len),
                                      op=type(self).__name__)
        if c.implementation == "reference":
            q = [self._heads(p(query)) for p in self.q_projs]
            k = [self._heads(p(f)) for p, f in zip(self.k_projs, features)]
            v = [self._heads(p(f)) for p, f in zip(self.v_projs, features)]
            context, weights = multilayer_attention_reference(q, k, v, layer_specific=c.layer_specific,
                                                              sum_contexts=c.sum_contexts, key_lengths=lengths)
            return self.out_proj(context), (weights if need_weights else None)
        if cached:
            k, v = cache["k"], cache["v"]
        else:
            k, v = self.project_memory(features)
            if cache is not None:
                cache["k"], cache["v"] = k, v
        result = multilayer_attention([p(query) for p in self.q_projs], k, v, num_heads=c.num_heads,
                                      layer_specific=c.layer_specific, key_lengths=lengths,
                                      scale=1.0 / math.sqrt(self.head_dim), return_probs=need_weights)
        context = result.out  # (B, T, sets*E): [c_1 .. c_sets]
        if c.layer_specific and c.sum_contexts:
            batch, length = query.shape[:2]
            context = context.view(batch, length, c.num_layers, c.embed_dim).sum(dim=2)  # (B, T, E) = sum_i c_i
        weights = result.probs
        if need_weights and c.layer_specific:
            weights = weights.view(weights.shape[0], c.num_layers, c.num_heads, *weights.shape[2:])  # (B, n, H, T, S)
        return self.out_proj(context), weights

    def _check_inputs(self, query: torch.Tensor, features: Sequence[torch.Tensor] | None) -> None:
        e, n = self.config.embed_dim, self.config.num_layers
        if query.dim() != 3 or query.shape[-1] != e:
            raise ValueError(f"query must have shape (batch, len, embed_dim={e}), got {tuple(query.shape)}")
        if features is None:  # keys and values come from the incremental-decoding cache
            return
        if len(features) != n:
            raise ValueError(f"features must hold num_layers={n} encoder outputs, got {len(features)}")
        for index, f in enumerate(features):
            if f.dim() != 3 or f.shape[0] != query.shape[0] or f.shape[-1] != e or f.shape[1] != features[0].shape[1]:
                raise ValueError(f"features[{index}] must have shape (batch={query.shape[0]}, src_len, embed_dim={e}) "
                                 f"like features[0], got {tuple(f.shape)}")
