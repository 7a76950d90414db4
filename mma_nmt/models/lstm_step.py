"""The LSTM decoder step as a function of tensors only, the form that CUDA-graph capture takes
(``torch.cuda.CUDAGraph``, ``torch.cuda.make_graphed_callables``) and ``torch.compile(mode="reduce-overhead")`` replays.

:meth:`LSTMDecoder.step <mma_nmt.models.lstm.LSTMDecoder.step>` reads and updates a state dict; here the state comes in
as tensors and goes out as new tensors, every step of a sentence batch has the same shapes (B, S fixed by the encoder
output), and nothing in it reads a tensor value on the host. docs/cuda.md ("The LSTM step on a GPU") says how to replay
it and what is measured.
"""

from __future__ import annotations

import torch
from torch import nn

from mma_nmt.models.incremental import EncoderOut


class LSTMStepFunction(nn.Module):
    """``forward(token_embedding (B, E), h (B, L, dh), c (B, L, dh), feed (B, d_fd), values (B, S, dh), lengths (B,)
    [, keys (B, heads, S, dh)])`` -> ``(a~ (B, d_sm), h, c, feed)``: one step of ``decoder`` (the model's own modules,
    so its parameters train). ``keys`` is given for ``score_form="projected_keys"`` (the state's ``"keys"``) and left
    out for ``"projected_query"``. Dropout follows ``decoder.training``; no attention weights are built."""

    def __init__(self, decoder: nn.Module):
        super().__init__()
        self.decoder = decoder

    def forward(self, token_embedding: torch.Tensor, h: torch.Tensor, c: torch.Tensor, feed: torch.Tensor,
                values: torch.Tensor, lengths: torch.Tensor, keys: torch.Tensor | None = None):
        state = {"h": h, "c": c, "feed": feed, "keys": keys}
        a_softmax, _ = self.decoder.step(token_embedding, EncoderOut(out=values, lengths=lengths), state)
        return a_softmax, state["h"], state["c"], state["feed"]

    @staticmethod
    def inputs(token_embedding: torch.Tensor, encoder_out: EncoderOut, state: dict) -> tuple[torch.Tensor, ...]:
        """The arguments of :meth:`forward` for a decoder state dict (``LSTMDecoder.initial_state``)."""
        keys = () if state["keys"] is None else (state["keys"],)
        return (token_embedding, state["h"], state["c"], state["feed"], encoder_out.out, encoder_out.lengths, *keys)
