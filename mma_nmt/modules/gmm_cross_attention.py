"""Gaussian-mixture concentrated cross-attention (SPEC section 5): a drop-in decoder cross-attention whose heads mix
dot-product attention with a K-component Gaussian mixture over source positions through a per-query gate.

Every row of the paper's Table 2 and its ablations is a value of :class:`GmmAttentionConfig`, not a separate module:

================================  ===================================================================================
paper row                         config
================================  ===================================================================================
Our Method (default)              ``attention="gmm", normalization="approximate", gate="learned"``
Our Method+Norm.                  ``normalization="strict"``
Synthesis Network                 ``normalization="unnormalised"`` (Graves' parametrisation, Z = 1)
Hard-Code Gaussian                ``attention="hard_coded"`` (fixed mean/variance replace dot-product attention)
Localness Gaussian                ``attention="localness"`` (learned Gaussian bias added to the logits)
Share Mean / Variance / Weight    ``share_mean=True`` / ``share_variance=True`` / ``share_weight=True``
Average Gating                    ``gate="average"`` (g = 0.5)
Dot-product / Gaussian Mixture    ``attention="dot"`` / ``attention="mixture"`` (g = 1)
K sweep                           ``num_components=K``
GMM in some decoder layers        ``gmm_layers=(4, 5)`` plus the module's ``layer_index``; other layers are plain
                                  dot-product cross-attention without predictor parameters
================================  ===================================================================================

Predictors (paper eqs. 7-9, 14) read each head's projected query ``Q(s_i)`` (size D, the same projection as the
dot-product path) and their weights are shared across heads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from mma_nmt.config_types import Implementation
from mma_nmt.modules.heads import init_attention_projections, joint_projection, merge_heads, split_heads
from mma_nmt.ops.fused_attention import fused_attention
from mma_nmt.ops.gmm_attention import DEFAULT_SIGMA_FLOOR, gmm_attention
from mma_nmt.ops.gmm_normalization import GMM_NORMALIZATIONS, GmmNormalization
from mma_nmt.ops.padding import resolve_key_lengths
from mma_nmt.modules.gmm_predictors import MixturePredictor, MixtureParams
from mma_nmt.reference.attention import attention_reference
from mma_nmt.reference.gmm_attention import gmm_attention_reference

AttentionKind = Literal["gmm", "dot", "mixture", "hard_coded", "localness"]


@dataclass
class GmmAttentionConfig:
    embed_dim: int
    num_heads: int
    num_components: int = 4  # K; the paper's best is 4
    attention: AttentionKind = "gmm"
    # the mixture's normalisation, which also picks the conversion of the predictors' outputs (gmm_normalization)
    normalization: GmmNormalization = "approximate"
    gate: Literal["learned", "average"] = "learned"
    share_mean: bool = False
    share_variance: bool = False
    share_weight: bool = False
    sigma_floor: float = DEFAULT_SIGMA_FLOOR
    hard_coded_sigma: float = 1.0  # hard-coded Gaussian: fixed standard deviation, in source positions
    length_ratio: float = 1.0  # hard-coded Gaussian: mean at source position target_position * length_ratio
    gmm_layers: tuple[int, ...] | None = None  # decoder layers that use GMM attention; None = every layer
    bias: bool = True
    implementation: Implementation = "fused"


class GmmCrossAttention(nn.Module):
    """Batch-first decoder cross-attention with Gaussian-mixture concentrated attention.

    ``forward(query (B, T, E), key (B, S, E), value = key, *, key_lengths (B,) or key_padding_mask (B, S),
    need_weights, cache)`` returns ``(output (B, T, E), weights or None)``; weights is a dict of
    ``alpha``, ``beta``, ``gamma`` (B, H, T, S) and ``gate`` (B, H, T), for analysis.

    Incremental decoding: pass the same dict as ``cache`` at every step (this module's own). The first call projects
    and caches the encoder keys/values and source lengths and later calls reuse them (once :meth:`has_cached_memory`
    is true, ``key`` and the lengths are not read: they may be None); the dict also holds the target step (hard-coded
    Gaussian; an int) and the previous means (synthesis network). Every tensor in it is batch-first, so
    ``mma_nmt.models.reorder_incremental_state`` follows beam reordering.
    """

    def __init__(self, config: GmmAttentionConfig, layer_index: int = 0):
        super().__init__()
        _validate(config)
        self.config = config
        self.layer_index = layer_index
        self.enabled = config.attention != "dot" and (config.gmm_layers is None or layer_index in config.gmm_layers)
        self.head_dim = config.embed_dim // config.num_heads
        self.q_proj = nn.Linear(config.embed_dim, config.embed_dim, bias=config.bias)
        self.k_proj = nn.Linear(config.embed_dim, config.embed_dim, bias=config.bias)
        self.v_proj = nn.Linear(config.embed_dim, config.embed_dim, bias=config.bias)
        self.out_proj = nn.Linear(config.embed_dim, config.embed_dim, bias=config.bias)
        self.predictor = MixturePredictor(config, self.head_dim) if self.enabled else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init_attention_projections((self.q_proj, self.k_proj, self.v_proj), self.out_proj)

    def extra_repr(self) -> str:
        c = self.config
        kind = c.attention if self.enabled else "dot"
        return (f"embed_dim={c.embed_dim}, heads={c.num_heads}, attention={kind}, K={c.num_components}, "
                f"normalization={c.normalization}, gate={c.gate}, layer={self.layer_index}, "
                f"implementation={c.implementation}")

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        return split_heads(x, self.config.num_heads)  # (B, L, E) -> (B, H, L, D)

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor | None = None,
        value: torch.Tensor | None = None,
        *,
        key_padding_mask: torch.Tensor | None = None,
        key_lengths: torch.Tensor | None = None,
        need_weights: bool = False,
        cache: dict | None = None,
    ) -> tuple[torch.Tensor, dict | None]:
        if query.dim() != 3 or query.shape[-1] != self.config.embed_dim:
            raise ValueError(
                f"query must have shape (batch, len, embed_dim={self.config.embed_dim}), got {tuple(query.shape)}")
        q = self.split_heads(self.q_proj(query))  # (B, H, T, D)
        k, v, lengths = self.encoder_side(key, value, key_padding_mask, key_lengths, cache, query.device)
        step = cache.get("step", 0) if cache is not None else 0
        if self.enabled:
            params = self.predictor(q, lengths, step=step, state=cache)
            out, weights = self.attend_gmm(q, k, v, lengths, params, need_weights)
        else:
            out, weights = self.attend_dot(q, k, v, lengths, need_weights)
        if cache is not None:
            cache["step"] = step + query.shape[1]
        return self.out_proj(merge_heads(out)), weights  # (B, H, T, D) -> (B, T, E)

    @staticmethod
    def has_cached_memory(cache: dict | None) -> bool:
        """Whether ``cache`` holds the projected encoder keys/values and source lengths (then not read again)."""
        return cache is not None and "k" in cache

    def encoder_side(self, key, value, key_padding_mask, key_lengths, cache, device):
        """Projected (B, H, S, D) keys and values and (B,) source lengths, from the cache when it has them."""
        if self.has_cached_memory(cache):
            return cache["k"], cache["v"], cache["key_lengths"]
        if key is None:
            raise ValueError("key (the encoder output) is required unless the cache already holds it")
        if value is None or value is key:
            k, v = joint_projection(key, (self.k_proj, self.v_proj))  # one GEMM: 2 x (B, S, E)
            k, v = self.split_heads(k), self.split_heads(v)  # (B, H, S, D) each
        else:
            k = self.split_heads(self.k_proj(key))  # (B, H, S, D)
            v = self.split_heads(self.v_proj(value))  # (B, H, S, D)
        lengths = resolve_key_lengths(key_lengths, key_padding_mask, device, keys=(k.shape[0], k.shape[2]),
                                      op=type(self).__name__)
        if lengths is None:  # the mixture needs J; without padding it is S
            lengths = torch.full((key.shape[0],), key.shape[1], dtype=torch.int64, device=device)
        if cache is not None:
            cache.update(k=k, v=v, key_lengths=lengths)
        return k, v, lengths

    def attend_dot(self, q, k, v, lengths, need_weights):
        """Plain dot-product cross-attention (the ``"dot"`` variant and layers outside ``gmm_layers``)."""
        if self.config.implementation == "reference":
            out, alpha = attention_reference(q, k, v, head_kinds=[0] * self.config.num_heads, key_lengths=lengths)
        else:
            result = fused_attention(q, k, v, head_kinds="G", key_lengths=lengths, return_probs=need_weights)
            out, alpha = result.out, result.probs
        return out, ({"alpha": alpha, "gamma": alpha} if need_weights else None)

    def attend_gmm(self, q, k, v, lengths, params: MixtureParams, need_weights):
        c = self.config
        kwargs = dict(omega=params.omega, mu=params.mu, sigma=params.sigma, gate=params.gate, key_lengths=lengths,
                      local_center=params.local_center, local_width=params.local_width,
                      normalization=params.normalization, sigma_floor=c.sigma_floor)
        if c.implementation == "reference":
            out, alpha, beta, gamma = gmm_attention_reference(q, k, v, **kwargs)
        else:
            out, _, _, alpha, beta, gamma = gmm_attention(q, k, v, return_weights=need_weights, **kwargs)
        if not need_weights:
            return out, None
        return out, {"alpha": alpha, "beta": beta, "gamma": gamma, "gate": params.gate}


def _validate(c: GmmAttentionConfig) -> None:
    if c.embed_dim % c.num_heads != 0:
        raise ValueError(f"embed_dim={c.embed_dim} must be divisible by num_heads={c.num_heads}")
    if c.num_components < 1:
        raise ValueError(f"num_components must be >= 1, got {c.num_components}")
    choices = {"attention": ("gmm", "dot", "mixture", "hard_coded", "localness"),
               "normalization": GMM_NORMALIZATIONS, "gate": ("learned", "average"),
               "implementation": ("fused", "reference")}
    for name, allowed in choices.items():
        if getattr(c, name) not in allowed:
            raise ValueError(f"{name} must be one of {allowed}, got {getattr(c, name)!r}")
    if not c.sigma_floor > 0:
        raise ValueError(f"sigma_floor must be positive, got {c.sigma_floor}")
