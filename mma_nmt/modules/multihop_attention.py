"""Multi-hop multi-head self-attention (SPEC section 4): the first hop is ordinary scaled dot-product attention per head
(the fused ``mma_nmt::attention`` operator); the second hop scores the H head outputs with an MLP, takes a softmax over
heads (the head gate) and scales each head's projected output (the fused ``mma_nmt::multihop_second_hop`` operator,
projections included). The fused path folds the per-head ``U_c_h`` into the output projection
(:meth:`MultiHopSelfAttention.second_hop_output`).

Parameters of the second hop, SPEC's choice: ``W_b`` (Db x D) and ``v_b`` (Db) shared, ``U_b_h`` (Db x D) and ``U_c_h``
(D x D) per head, i.e. ``(H + 1) * Db * D + Db + H * D * D`` values — 69,696 per layer for the paper's E = 512, H = 8,
Db = D = 64. The paper's Table 4 reports about 33K extra parameters for one multi-hop layer, which suggests a smaller
second hop than SPEC's; ``hop_dim`` (Db) is configurable and :func:`second_hop_parameter_count` gives the count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import nn
from torch.nn import functional as F

from mma_nmt.config_io import check_choices
from mma_nmt.config_types import Implementation
from mma_nmt.modules.mixed_multihead_attention import MixedAttentionConfig, MixedMultiheadAttention
from mma_nmt.modules.heads import init_attention_projections, merge_heads, split_heads
from mma_nmt.ops.argument_defaults import draw_dropout_seed
from mma_nmt.ops.fused_attention import fused_attention
from mma_nmt.ops.padding import resolve_key_lengths
from mma_nmt.ops.second_hop import multihop_second_hop
from mma_nmt.reference.attention import attention_reference
from mma_nmt.reference.multihop import second_hop_reference


@dataclass
class MultiHopAttentionConfig:
    embed_dim: int
    num_heads: int
    hop_dim: int | None = None  # Db, the second hop's MLP size; None = head size D (SPEC default)
    dropout: float = 0.0  # first-hop attention-weight dropout
    bias: bool = True  # biases of the q/k/v/out projections (the second hop has none, as in SPEC)
    implementation: Implementation = "fused"  # or "reference": the plain-PyTorch formulas, same parameters

    def __post_init__(self):
        check_choices("", self)


@dataclass
class MultiHopPlacement:
    """Which encoder layers (1-based) use the second hop; the paper's best is layer 4 of 6 only."""

    num_layers: int = 6
    second_hop_layers: tuple[int, ...] = (4,)

    def __post_init__(self) -> None:
        bad = [layer for layer in self.second_hop_layers if not 1 <= layer <= self.num_layers]
        if bad:
            raise ValueError(f"second_hop_layers must lie in [1, num_layers={self.num_layers}], got {bad}")

    def has_second_hop(self, layer: int) -> bool:
        return layer in self.second_hop_layers


class MultiHopWeights(NamedTuple):
    attention: torch.Tensor | None  # (B, H, T, S) first-hop weights, when need_weights
    head_gate: torch.Tensor | None  # (B, T, H) head-gate weights beta (sum to one over H), when need_head_gate


def second_hop_parameter_count(config: MultiHopAttentionConfig) -> int:
    """Number of second-hop parameters: W_b, v_b, U_b_h and U_c_h."""
    heads, head_dim = config.num_heads, config.embed_dim // config.num_heads
    hop_dim = config.hop_dim or head_dim
    return (heads + 1) * hop_dim * head_dim + hop_dim + heads * head_dim * head_dim


class MultiHopSelfAttention(nn.Module):
    """Batch-first multi-head self-attention with the second hop.

    ``forward(query (B, T, E), key = query, value = key, *, key_padding_mask (B, S) or key_lengths (B,),
    need_weights=False, need_head_gate=False)`` returns ``(output (B, T, E), MultiHopWeights or None)``.
    """

    def __init__(self, config: MultiHopAttentionConfig):
        super().__init__()
        if config.embed_dim % config.num_heads != 0:
            raise ValueError(f"embed_dim={config.embed_dim} must be divisible by num_heads={config.num_heads}")
        if config.hop_dim is not None and config.hop_dim < 1:
            raise ValueError(f"hop_dim must be >= 1 or None, got {config.hop_dim}")
        self.config = config
        heads, self.head_dim = config.num_heads, config.embed_dim // config.num_heads
        self.hop_dim = config.hop_dim or self.head_dim
        e = config.embed_dim
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (nn.Linear(e, e, bias=config.bias) for _ in range(4))
        self.w_b = nn.Parameter(torch.empty(self.hop_dim, self.head_dim))
        self.v_b = nn.Parameter(torch.empty(self.hop_dim))
        self.u_b = nn.Parameter(torch.empty(heads, self.hop_dim, self.head_dim))
        self.u_c = nn.Parameter(torch.empty(heads, self.head_dim, self.head_dim))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init_attention_projections((self.q_proj, self.k_proj, self.v_proj), self.out_proj)
        bound = math.sqrt(6.0 / (self.hop_dim + self.head_dim))
        for weight in (self.w_b, self.u_b):
            nn.init.uniform_(weight, -bound, bound)
        nn.init.uniform_(self.v_b, -1.0 / math.sqrt(self.hop_dim), 1.0 / math.sqrt(self.hop_dim))
        nn.init.uniform_(self.u_c, -math.sqrt(3.0 / self.head_dim), math.sqrt(3.0 / self.head_dim))

    def forward(self, query: torch.Tensor, key: torch.Tensor | None = None, value: torch.Tensor | None = None, *,
                key_padding_mask: torch.Tensor | None = None, key_lengths: torch.Tensor | None = None,
                need_weights: bool = False, need_head_gate: bool = False
                ) -> tuple[torch.Tensor, MultiHopWeights | None]:
        if query.dim() != 3 or query.shape[-1] != self.config.embed_dim:
            raise ValueError(
                f"query must have shape (batch, len, embed_dim={self.config.embed_dim}), got {tuple(query.shape)}")
        key = query if key is None else key
        value = key if value is None else value
        heads = self.config.num_heads
        q = split_heads(self.q_proj(query), heads)  # (B, H, T, D)
        k = split_heads(self.k_proj(key), heads)  # (B, H, S, D)
        v = split_heads(self.v_proj(value), heads)  # (B, H, S, D)
        lengths = resolve_key_lengths(key_lengths, key_padding_mask, query.device, keys=(k.shape[0], k.shape[2]),
                                      op=type(self).__name__)
        a, probs = self.first_hop(q, k, v, lengths, need_weights)
        out, gate = self.second_hop_output(q, a)  # (B, T, E), (B, H, T)
        weights = None
        if need_weights or need_head_gate:
            weights = MultiHopWeights(probs, gate.transpose(1, 2) if need_head_gate else None)  # gate (B, T, H)
        return out, weights

    def first_hop(self, q, k, v, key_lengths, need_weights: bool):
        """Scaled dot-product attention per head on (B, H, L, D) tensors; returns (a (B, H, T, D), weights or None)."""
        dropout = self.config.dropout if self.training else 0.0
        if self.config.implementation == "reference":
            seed = draw_dropout_seed(dropout)
            out, probs = attention_reference(q, k, v, head_kinds=[0] * q.shape[1], key_lengths=key_lengths,
                                             dropout_p=dropout, seed=seed)
            return out, (probs if need_weights else None)
        result = fused_attention(q, k, v, key_lengths=key_lengths, dropout_p=dropout, return_probs=need_weights)
        return result.out, result.probs

    def second_hop(self, q: torch.Tensor, a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``a'_h = beta_h U_c_h a_h`` from the queries ``q`` and first-hop outputs ``a`` (both (B, H, T, D)).

        Returns ``(a' (B, H, T, D), beta (B, H, T))``. Fused: one operator, projections included (on the CPU its
        ``a'`` is stored (B, T, H, D), so merging the heads is a view).
        """
        if self.config.implementation == "reference":
            return second_hop_reference(q, a, self.w_b, self.v_b, self.u_b, self.u_c)
        return multihop_second_hop(q, a, self.w_b, self.u_b, self.u_c, self.v_b)

    def second_hop_output(self, q: torch.Tensor, a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The second hop and the output projection, ``concat_h(beta_h U_c_h a_h) W_O^T + b_O``, from ``q`` and ``a``
        (both (B, H, T, D)). Returns ``(output (B, T, E), beta (B, H, T))``.

        The reference runs SPEC's formula (:meth:`second_hop`, then ``out_proj``). The fused path folds ``U_c`` into
        the output projection, ``sum_h beta_h (W_O,h U_c_h) a_h``: the operator returns ``beta_h a_h`` and one GEMM
        with the (E, H*D) weight ``[W_O,1 U_c_1 ... W_O,H U_c_H]`` replaces the U_c products and the output
        projection. Folding costs ``H*E*D*D`` multiply-adds per call against ``B*T*H*D*D`` for the U_c products, so it
        is used when there are more positions than ``E`` (otherwise the unfolded path runs). Same parameters, same
        mathematics; the rounding differs (float32 rounding of a changed order of products).
        """
        batch, _, length, _ = a.shape
        if self.config.implementation == "reference" or batch * length <= self.config.embed_dim:
            out, gate = self.second_hop(q, a)  # (B, H, T, D), (B, H, T)
            return self.out_proj(merge_heads(out)), gate  # (B, H, T, D) -> (B, T, E)
        scaled, gate = multihop_second_hop(q, a, self.w_b, self.u_b, None, self.v_b)  # beta_h a_h (B, H, T, D)
        weight = folded_output_weight(self.out_proj.weight, self.u_c)  # (E, H*D)
        return F.linear(merge_heads(scaled), weight, self.out_proj.bias), gate  # (B, H, T, D) -> (B, T, E)


def folded_output_weight(w_o: torch.Tensor, u_c: torch.Tensor) -> torch.Tensor:
    """``[W_O,1 U_c_1 ... W_O,H U_c_H]`` (E, H*D) from the output projection's weight ``w_o`` (E, H*Dc), whose column
    block ``h`` is ``W_O,h``, and the per-head ``u_c`` (H, Dc, D)."""
    embed = w_o.shape[0]
    heads, value_dim, dim = u_c.shape
    per_head = w_o.view(embed, heads, value_dim).transpose(0, 1)  # (E, H*Dc) -> (H, E, Dc) view
    return torch.bmm(per_head, u_c).transpose(0, 1).reshape(embed, heads * dim)  # (H, E, D) -> (E, H*D)


def encoder_self_attention(config: MultiHopAttentionConfig, placement: MultiHopPlacement, layer: int) -> nn.Module:
    """The self-attention of encoder layer ``layer`` (1-based) for a model builder: multi-hop where ``placement``
    puts the second hop, ordinary multi-head attention (the ``"G"`` mixed module) elsewhere."""
    if not 1 <= layer <= placement.num_layers:
        raise ValueError(f"layer must lie in [1, {placement.num_layers}], got {layer}")
    if placement.has_second_hop(layer):
        return MultiHopSelfAttention(config)
    return MixedMultiheadAttention(MixedAttentionConfig(
        embed_dim=config.embed_dim, num_heads=config.num_heads, head_spec="G", dropout=config.dropout,
        bias=config.bias, implementation=config.implementation))
