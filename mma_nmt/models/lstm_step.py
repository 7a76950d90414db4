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


class SearchStepFunction(LSTMStepFunction):
    """:class:`LSTMStepFunction` for greedy and beam search (``decode.compile``). The same step; its own ``forward``
    gives it its own Dynamo cache, so that the search's graphs (no gradients, eval mode) do not count towards the
    recompile limit of the training step's, which the same model may compile too (``train.compile``)."""

    def forward(self, token_embedding: torch.Tensor, h: torch.Tensor, c: torch.Tensor, feed: torch.Tensor,
                values: torch.Tensor, lengths: torch.Tensor, keys: torch.Tensor | None = None):
        return super().forward(token_embedding, h, c, feed, values, lengths, keys)


class CapturedStep:
    """A step function captured once in a ``torch.cuda.CUDAGraph`` on static copies of ``sample`` (its arguments), for
    inference: ``captured(*inputs)`` copies ``inputs`` into the static tensors, replays the graph and returns the
    static outputs (overwritten by the next call: copy what must outlive it). Capture and calls run under
    ``torch.no_grad``; the inputs must have the sample's shapes, dtypes and device (one capture per batch size and
    source length). For training, ``torch.cuda.make_graphed_callables(LSTMStepFunction(decoder), sample)`` captures
    forward and backward."""

    def __init__(self, step, sample: tuple[torch.Tensor, ...], *, warmup: int = 3):
        with torch.no_grad():
            self.static = tuple(x.clone() for x in sample)
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):  # warm-up off the default stream, as CUDA-graph capture asks
                for _ in range(warmup):
                    step(*self.static)
            torch.cuda.current_stream().wait_stream(side)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self.outputs = step(*self.static)

    def __call__(self, *inputs: torch.Tensor):
        with torch.no_grad():
            for buffer, value in zip(self.static, inputs, strict=True):
                buffer.copy_(value)
        self.graph.replay()
        return self.outputs
