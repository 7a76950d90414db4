"""Mixed multi-head self-attention (SPEC section 1): each head has its own hard mask kind (global, local, forward,
backward, causal). With spec ``"G"`` it is ordinary multi-head attention, so the same module also serves as standard
encoder self-attention, causal decoder self-attention (``"C"``) and cross-attention (``"G"`` with separate keys)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from mma_nmt.config_io import check_choices
from mma_nmt.config_types import Implementation
from mma_nmt.modules.heads import init_attention_projections, joint_projection, merge_heads, split_heads
from mma_nmt.ops.argument_defaults import draw_dropout_seed
from mma_nmt.ops.fused_attention import fused_attention
from mma_nmt.ops.head_spec import format_head_spec, parse_head_spec
from mma_nmt.ops.padding import resolve_key_lengths
from mma_nmt.reference.attention import attention_reference


@dataclass
class MixedAttentionConfig:
    embed_dim: int
    num_heads: int
    head_spec: str = "GLFB"  # letters per head, stretched to num_heads the paper's way ("GLFB" -> "GGLLFFBB")
    window: int = 1  # local heads see |i - j| <= window; the paper's best is 1
    dropout: float = 0.0  # attention-weight dropout
    bias: bool = True
    implementation: Implementation = "fused"  # or "reference": the plain-PyTorch formula, same parameters

    def __post_init__(self):
        check_choices("", self)


class MixedMultiheadAttention(nn.Module):
    """Batch-first multi-head attention with a per-head mask kind.

    ``forward(query (B, T, E), key (B, S, E) = query, value = key, *, key_padding_mask (B, S) bool or key_lengths (B,))``
    returns ``(output (B, T, E), weights (B, H, T, S) or None)``.
    """

    def __init__(self, config: MixedAttentionConfig):
        super().__init__()
        if config.embed_dim % config.num_heads != 0:
            raise ValueError(f"embed_dim={config.embed_dim} must be divisible by num_heads={config.num_heads}")
        if config.window < 0:
            raise ValueError(f"window must be >= 0, got {config.window}")
        if not 0.0 <= config.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {config.dropout}")
        self.config = config
        self.head_dim = config.embed_dim // config.num_heads
        self.head_kinds = parse_head_spec(config.head_spec, config.num_heads)
        self.q_proj = nn.Linear(config.embed_dim, config.embed_dim, bias=config.bias)
        self.k_proj = nn.Linear(config.embed_dim, config.embed_dim, bias=config.bias)
        self.v_proj = nn.Linear(config.embed_dim, config.embed_dim, bias=config.bias)
        self.out_proj = nn.Linear(config.embed_dim, config.embed_dim, bias=config.bias)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init_attention_projections((self.q_proj, self.k_proj, self.v_proj), self.out_proj)

    def extra_repr(self) -> str:
        c = self.config
        return (f"embed_dim={c.embed_dim}, heads={format_head_spec(self.head_kinds)}, window={c.window}, "
                f"dropout={c.dropout}, implementation={c.implementation}")

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        return split_heads(x, self.config.num_heads)  # (B, L, E) -> (B, H, L, D)

    def project_self(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Self-attention's queries, keys and values, (B, L, E) -> 3 x (B, H, L, D), from one GEMM."""
        q, k, v = joint_projection(x, (self.q_proj, self.k_proj, self.v_proj))  # 3 x (B, L, E)
        return self.split_heads(q), self.split_heads(k), self.split_heads(v)

    def project_memory(self, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Cross-attention's keys and values of the same memory, (B, S, E) -> 2 x (B, H, S, D), from one GEMM."""
        k, v = joint_projection(memory, (self.k_proj, self.v_proj))  # 2 x (B, S, E)
        return self.split_heads(k), self.split_heads(v)

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor | None = None,
        value: torch.Tensor | None = None,
        *,
        key_padding_mask: torch.Tensor | None = None,
        key_lengths: torch.Tensor | None = None,
        need_weights: bool = False,
        query_offset: int = 0,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        if query.dim() != 3 or query.shape[-1] != self.config.embed_dim:
            raise ValueError(
                f"query must have shape (batch, len, embed_dim={self.config.embed_dim}), got {tuple(query.shape)}"
            )
        if (key is None or key is query) and (value is None or value is query):
            q, k, v = self.project_self(query)  # (B, H, T, D) each
        else:
            key = query if key is None else key
            value = key if value is None else value
            q = self.split_heads(self.q_proj(query))  # (B, H, T, D)
            k = self.split_heads(self.k_proj(key))  # (B, H, S, D)
            v = self.split_heads(self.v_proj(value))  # (B, H, S, D)
        lengths = resolve_key_lengths(key_lengths, key_padding_mask, query.device, keys=(k.shape[0], k.shape[2]),
                                      op=type(self).__name__)
        out, weights = self.attend(q, k, v, lengths, need_weights=need_weights, query_offset=query_offset)
        return self.out_proj(merge_heads(out)), weights  # (B, H, T, D) -> (B, T, E)

    def attend(self, q, k, v, key_lengths, *, need_weights: bool, query_offset: int):
        """Per-head attention on already projected (B, H, L, D) tensors; returns (out, weights or None)."""
        c = self.config
        dropout = c.dropout if self.training else 0.0
        if c.implementation == "reference":
            seed = draw_dropout_seed(dropout)
            out, probs = attention_reference(q, k, v, head_kinds=self.head_kinds, key_lengths=key_lengths,
                                             window=c.window, query_offset=query_offset, dropout_p=dropout, seed=seed)
            return out, (probs if need_weights else None)
        result = fused_attention(q, k, v, head_kinds=self.head_kinds, key_lengths=key_lengths, window=c.window,
                                 query_offset=query_offset, dropout_p=dropout, return_probs=need_weights)
        return result.out, result.probs
