"""The incremental-decoding contract shared by every model (Transformer and LSTM) and by the search functions.

A model exposes ``encode(src (B, S), src_lengths (B,)) -> EncoderOut`` and
``decode(prev_tokens (B, T), encoder_out, incremental_state=None) -> (logits (B, T', V), attn (B, T', S) or None)``.
With ``incremental_state`` (a dict the caller creates empty and keeps between calls) only the last token of
``prev_tokens`` is fed and ``T' = 1``; the modules keep what they need (cached keys and values, recurrent states) in it.

Rule that makes beam search model-agnostic: every tensor stored in an incremental state or an ``EncoderOut`` has the
batch (or batch*beam) dimension first, so reordering for beams is one ``index_select`` on dim 0 for all of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import torch


@dataclass
class EncoderOut:
    """out (B, S, E) what cross-attention reads (the top encoder states, or their aggregation with
    ``encoder.layer_aggregation``); lengths (B,) true source lengths; layer_states: per-layer outputs (B, S, E), bottom
    to top (what MLMHA reads); extra: model-specific batch-first tensors (e.g. the LSTM's final states)."""

    out: torch.Tensor
    lengths: torch.Tensor
    layer_states: list[torch.Tensor] = field(default_factory=list)
    extra: dict[str, torch.Tensor] = field(default_factory=dict)

    def index_select(self, order: torch.Tensor) -> "EncoderOut":
        """The rows ``order`` (N,) of every tensor: used to expand a batch to beams and to reorder beams."""
        return replace(
            self,
            out=self.out.index_select(0, order),
            lengths=self.lengths.index_select(0, order),
            layer_states=[s.index_select(0, order) for s in self.layer_states],
            extra={k: v.index_select(0, order) for k, v in self.extra.items()},
        )


IncrementalState = dict[str, Any]


def module_cache(state: IncrementalState | None, name: str) -> dict[str, torch.Tensor] | None:
    """The sub-dict of ``state`` owned by the module called ``name`` (created on first use), or None without a state."""
    if state is None:
        return None
    return state.setdefault(name, {})


def reorder_incremental_state(state: IncrementalState, order: torch.Tensor) -> None:
    """In place: keeps rows ``order`` (N,) of every tensor in ``state`` (nested dicts and lists of tensors allowed)."""
    for key, value in state.items():
        if isinstance(value, dict):
            reorder_incremental_state(value, order)
        elif isinstance(value, torch.Tensor):
            state[key] = value.index_select(0, order)
        elif isinstance(value, list) and all(isinstance(x, torch.Tensor) for x in value):
            state[key] = [x.index_select(0, order) for x in value]
