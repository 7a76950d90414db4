"""Multi-head Luong attention for an LSTM encoder-decoder (SPEC section 2, Fung & Mak). For each head ``i``:
``e_s = h_t^T W_sc_i hs_s``, ``alpha_i = softmax_s(e)`` over the real source positions, ``c_i = sum_s alpha_i[s] hs_s``,
``a~_i = tanh(W_sm_i [c_i; h_t])`` (d_sm/h values) and ``a-_i = tanh(W_fd_i [c_i; h_t])`` (d_fd/h values), concatenated
over heads. ``num_heads = 1`` is the single-head baseline.

The score ``h_t^T W_sc_i hs_s`` has two forms (``LuongAttentionConfig.score_form``), the same function of the same
parameters:

- ``"projected_keys"`` (the default): the keys ``W_sc_i hs`` are computed once per sentence
  (:meth:`LuongMultiheadAttention.precompute`, a (B, h, S, dh) tensor); a decoder step is then one query against h key
  sets and the shared encoder states (``mma_nmt::shared_value_attention``);
- ``"projected_query"`` (OpenNMT-py's "general" score): each step projects the decoder state per head,
  ``q_i = W_sc_i^T h_t``, and scores it against the encoder states themselves. Keys and values are then the same
  (B, S, dh) tensor for every head, so the heads are h queries of one attention (the operator with one head and
  h * T query rows): no per-head key tensor, nor its gradient, exists.

``W_sm_i`` and ``W_fd_i`` are stored split by what they multiply, ``c_i`` or ``h_t`` (:meth:`paper_weights` rebuilds
the paper's form).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import nn

from mma_nmt.config_io import check_choices
from mma_nmt.config_types import Implementation, LuongScoreForm
from mma_nmt.ops.padding import resolve_key_lengths
from mma_nmt.ops.shared_value_attention import shared_value_attention
from mma_nmt.reference.luong_attention import shared_value_attention_reference


@dataclass
class LuongAttentionConfig:
    hidden_dim: int  # dh: size of encoder states and of the decoder state
    num_heads: int = 1  # h
    softmax_dim: int = 512  # d_sm: size of a~ (input of the output softmax layer), split over heads
    feed_dim: int = 1024  # d_fd: size of a- (input feeding), split over heads
    implementation: Implementation = "fused"  # or "reference": plain PyTorch on the same precomputed keys
    score_form: LuongScoreForm = "projected_keys"  # or "projected_query": W_sc_i applied to h_t (module docstring)

    def __post_init__(self):
        check_choices("", self)


class LuongMemory(NamedTuple):
    """What a sentence's decoder steps share, computed once by :meth:`LuongMultiheadAttention.precompute`."""

    keys: torch.Tensor | None  # (B, h, S, dh): W_sc_i hs_s; None with score_form="projected_query" (no keys needed)
    values: torch.Tensor  # (B, S, dh): the encoder states hs
    key_lengths: torch.Tensor | None  # (B,) int64 real source lengths


class LuongMultiheadAttention(nn.Module):
    """The paper's attention layer. ``forward(h (B, dh) or (B, T, dh), memory)`` returns ``(a~ (B, [T,] d_sm),
    a- (B, [T,] d_fd), alpha (B, h, [T,] S) or None)``."""

    def __init__(self, config: LuongAttentionConfig):
        super().__init__()
        h = config.num_heads
        if h < 1 or config.softmax_dim % h or config.feed_dim % h:
            raise ValueError(f"num_heads={h} must be >= 1 and divide softmax_dim={config.softmax_dim} and "
                             f"feed_dim={config.feed_dim}")
        self.config = config
        dh = config.hidden_dim
        self.sm_per_head, self.fd_per_head = config.softmax_dim // h, config.feed_dim // h
        per_head_out = self.sm_per_head + self.fd_per_head
        self.w_sc = nn.Parameter(torch.empty(h, dh, dh))  # (h, dh, dh): score matrices W_sc_i
        self.w_context = nn.Parameter(torch.empty(h, per_head_out, dh))  # [W_sm_i; W_fd_i] columns that multiply c_i
        self.w_state = nn.Parameter(torch.empty(h, per_head_out, dh))  # [W_sm_i; W_fd_i] columns that multiply h_t
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = (1.0 / self.config.hidden_dim) ** 0.5
        nn.init.uniform_(self.w_sc, -bound, bound)
        bound = (3.0 / (2 * self.config.hidden_dim)) ** 0.5
        nn.init.uniform_(self.w_context, -bound, bound)
        nn.init.uniform_(self.w_state, -bound, bound)

    def paper_weights(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(W_sc (h, dh, dh), W_sm (h, d_sm/h, 2 dh), W_fd (h, d_fd/h, 2 dh))`` in the paper's form."""
        joined = torch.cat([self.w_context, self.w_state], dim=-1)  # (h, d_sm/h + d_fd/h, 2 dh) acting on [c; h_t]
        return self.w_sc, joined[:, : self.sm_per_head], joined[:, self.sm_per_head:]

    def precompute(self, encoder_states: torch.Tensor, *, key_lengths: torch.Tensor | None = None,
                   key_padding_mask: torch.Tensor | None = None) -> LuongMemory:
        """Keys of every head for a batch of sentences: ``encoder_states`` (B, S, dh) -> :class:`LuongMemory` (without
        keys for ``score_form="projected_query"``, which scores against the encoder states themselves)."""
        if encoder_states.dim() != 3 or encoder_states.shape[-1] != self.config.hidden_dim:
            raise ValueError(f"encoder_states must have shape (batch, src_len, hidden_dim={self.config.hidden_dim}), "
                             f"got {tuple(encoder_states.shape)}")
        batch, src_len, dh = encoder_states.shape
        heads = self.config.num_heads
        keys = None
        if self.config.score_form == "projected_keys":
            # (B, S, dh) @ (dh, h*dh) -> (B, S, h, dh) -> (B, h, S, dh)
            keys = torch.matmul(encoder_states, self.w_sc.reshape(heads * dh, dh).t())
            keys = keys.view(batch, src_len, heads, dh).transpose(1, 2).contiguous()
        lengths = resolve_key_lengths(key_lengths, key_padding_mask, encoder_states.device, keys=(batch, src_len),
                                      op=f"{type(self).__name__}.precompute")
        return LuongMemory(keys, encoder_states, lengths)

    @staticmethod
    def reorder_memory(memory: LuongMemory, new_order: torch.Tensor) -> LuongMemory:
        """Selects sentences (beam search): ``new_order`` (B',) indices into the batch."""
        lengths = None if memory.key_lengths is None else memory.key_lengths.index_select(0, new_order)
        keys = None if memory.keys is None else memory.keys.index_select(0, new_order)
        return LuongMemory(keys, memory.values.index_select(0, new_order), lengths)

    def forward(self, decoder_states: torch.Tensor, memory: LuongMemory, *, need_weights: bool = False
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        one_step = decoder_states.dim() == 2
        h_t = decoder_states.unsqueeze(1) if one_step else decoder_states  # (B, T, dh)
        if h_t.dim() != 3 or h_t.shape[-1] != self.config.hidden_dim or h_t.shape[0] != memory.values.shape[0]:
            raise ValueError(f"decoder_states must have shape (batch={memory.values.shape[0]}, [steps,] "
                             f"hidden_dim={self.config.hidden_dim}), got {tuple(decoder_states.shape)}")
        batch, steps, dh = h_t.shape
        heads = self.config.num_heads
        if self.config.score_form == "projected_query":
            context, alpha = self.attend_projected_query(self.project_queries(h_t), memory, need_weights)
        else:
            query = h_t.unsqueeze(1).expand(batch, heads, steps, dh)  # (B, h, T, dh), the same query for every head
            context, alpha = self.attend(query, memory, need_weights)  # (B, h, T, dh)
        # per head: W_c_i c_i + W_s_i h_t, for the softmax-layer and input-feeding outputs at once
        from_context = torch.einsum("bhtd,hod->bhto", context, self.w_context)  # (B, h, T, o)
        from_state = torch.matmul(h_t, self.w_state.reshape(-1, dh).t()).view(batch, steps, heads, -1)  # (B, T, h, o)
        joined = torch.tanh(from_context.transpose(1, 2) + from_state)  # (B, T, h, o)
        # one split, whose backward is one cat (two slices' would zero-fill and copy each, then add)
        tilde, bar = joined.split([self.sm_per_head, self.fd_per_head], dim=-1)
        a_tilde = tilde.reshape(batch, steps, -1)  # (B, T, d_sm), heads concatenated
        a_bar = bar.reshape(batch, steps, -1)  # (B, T, d_fd)
        if one_step:
            return a_tilde.squeeze(1), a_bar.squeeze(1), None if alpha is None else alpha.squeeze(2)
        return a_tilde, a_bar, alpha

    def project_queries(self, h_t: torch.Tensor) -> torch.Tensor:
        """``q_i = W_sc_i^T h_t`` of every head: (B, T, dh) -> (B, h, T, dh), a view of one batched GEMM over the heads,
        the decoder states a stride-0 view over them (nothing is copied, the weights least of all). The form
        ``h_t.unsqueeze(1) @ w_sc`` broadcast the weights over the batch instead: B copies of them forward and B
        outer products backward, h x dh^2 elements each, 512M a step each way at B 128, h 4, dh 1024."""
        batch, steps, dh = h_t.shape
        heads = self.config.num_heads
        states = h_t.reshape(1, batch * steps, dh).expand(heads, batch * steps, dh)  # the same rows for every head
        rows = torch.bmm(states, self.w_sc)  # (h, B T, dh) @ (h, dh, dh) -> (h, B T, dh)
        return rows.view(heads, batch, steps, dh).transpose(0, 1)  # (h, B, T, dh) -> (B, h, T, dh)

    def attend(self, query: torch.Tensor, memory: LuongMemory, need_weights: bool):
        """Context vectors (B, h, T, dh) of every head and, when asked for, the weights (B, h, T, S)."""
        if memory.keys is None:
            raise ValueError(f"{type(self).__name__}: the memory holds no keys (it was precomputed with score_form="
                             f"'projected_query'); precompute it with this module (score_form='projected_keys')")
        return self._shared_value(query, memory.keys, memory, need_weights)

    def attend_projected_query(self, query: torch.Tensor, memory: LuongMemory, need_weights: bool):
        """:meth:`attend` for projected queries (B, h, T, dh): the keys are the encoder states of every head, so the
        heads are h * T query rows of one head."""
        batch, heads, steps, dh = query.shape
        rows = query.reshape(batch, 1, heads * steps, dh)  # (B, h, T, dh) -> (B, 1, h*T, dh)
        keys = memory.values.unsqueeze(1)  # (B, 1, S, dh): the encoder states, a view
        context, alpha = self._shared_value(rows, keys, memory, need_weights)  # (B, 1, h*T, dh), (B, 1, h*T, S)
        context = context.view(batch, heads, steps, -1)  # (B, h, T, dh)
        return context, None if alpha is None else alpha.view(batch, heads, steps, -1)  # (B, h, T, S)

    def _shared_value(self, query: torch.Tensor, keys: torch.Tensor, memory: LuongMemory, need_weights: bool):
        """The operator (or its reference) on query (B, H, T, dh) and keys (B, H, S, dh) against the shared values."""
        if self.config.implementation == "reference":
            context, probs = shared_value_attention_reference(query, keys, memory.values,
                                                              key_lengths=memory.key_lengths)
            return context, (probs if need_weights else None)
        result = shared_value_attention(query, keys, memory.values, key_lengths=memory.key_lengths,
                                        return_probs=need_weights)
        return result.out, result.probs
