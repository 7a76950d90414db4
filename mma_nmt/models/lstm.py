"""LSTM encoder-decoder of the multi-head Luong attention paper (SPEC section 2): bidirectional encoder,
unidirectional decoder with input feeding, behind the same incremental contract as the Transformer."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from mma_nmt.models.config import LSTMConfig
from mma_nmt.models.incremental import EncoderOut
from mma_nmt.models.lstm_attention import build_luong_attention, init_reference_layout, load_reference_layout
from mma_nmt.models.lstm_step import LSTMStepFunction, SearchStepFunction
from mma_nmt.models.transformer import make_embedding
from mma_nmt.modules import LuongMemory


class LSTMEncoder(nn.Module):
    def __init__(self, config: LSTMConfig, embedding: nn.Embedding):
        super().__init__()
        if config.hidden_size % 2:
            raise ValueError(f"hidden_size={config.hidden_size} must be even (each direction gets half)")
        self.embedding, self.dropout = embedding, config.dropout
        self.rnn = nn.LSTM(config.embed_dim, config.hidden_size // 2, num_layers=config.layers, bidirectional=True,
                           batch_first=True, dropout=config.dropout if config.layers > 1 else 0.0)

    def forward(self, src: torch.Tensor, lengths: torch.Tensor) -> EncoderOut:
        """src (B, S), lengths (B,) on the host or on src's device -> states (B, S, dh) and final (h, c), each
        (B, layers, dh) in ``extra``; the returned lengths are on src's device.

        Packing (cuDNN's variable-length LSTM) takes its lengths on the host. Lengths given there are never read back
        from the device: the sentences are sorted by length on the host and the order travels with the lengths in
        one copy. Lengths on the device are read once (``pack_padded_sequence(enforce_sorted=False)`` read them too,
        and its ``pad_packed_sequence`` read its order back)."""
        host_lengths = lengths.cpu()  # no copy for host lengths; the one read of the device for device lengths
        sorted_lengths, order = torch.sort(host_lengths, descending=True)  # (B,) longest first, as packing wants
        on_device = torch.stack([host_lengths, order, order.argsort()]).to(src.device, non_blocking=True)  # (3, B)
        lengths, order_on_device, inverse_on_device = on_device.unbind(0)  # the last undoes the order
        # the token ids sorted, not their embeddings: an integer copy with nothing to scatter back in backward
        x = F.dropout(self.embedding(src.index_select(0, order_on_device)), self.dropout, self.training)  # (B, S, E)
        packed = pack_padded_sequence(x, sorted_lengths, batch_first=True)
        out, (h, c) = self.rnn(packed)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=src.shape[1])  # (B, S, dh) longest first
        out = out.index_select(0, inverse_on_device)  # (B, S, dh) in the batch's order
        h, c = h.index_select(1, inverse_on_device), c.index_select(1, inverse_on_device)  # (layers*2, B, dh/2)

        def join(state):  # (layers*2, B, dh/2) -> (B, layers, dh): forward and backward halves side by side
            layers2, batch, half = state.shape
            state = state.view(layers2 // 2, 2, batch, half).permute(2, 0, 1, 3)  # (B, layers, 2, dh/2)
            return state.reshape(batch, layers2 // 2, 2 * half)

        return EncoderOut(out=out, lengths=lengths, layer_states=[out], extra={"h": join(h), "c": join(c)})


class LSTMDecoder(nn.Module):
    def __init__(self, config: LSTMConfig, embedding: nn.Embedding):
        super().__init__()
        self.config, self.embedding = config, embedding
        sizes = [config.embed_dim + config.feed_dim] + [config.hidden_size] * (config.layers - 1)
        self.cells = nn.ModuleList(nn.LSTMCell(size, config.hidden_size) for size in sizes)
        self.attention = build_luong_attention(config)  # LuongMultiheadAttention, either implementation
        self.attention.register_load_state_dict_pre_hook(load_reference_layout)  # checkpoints before issue 23

    def initial_state(self, encoder_out: EncoderOut) -> dict:
        batch = encoder_out.out.shape[0]
        return {"h": encoder_out.extra["h"], "c": encoder_out.extra["c"],  # (B, layers, dh)
                "feed": encoder_out.out.new_zeros(batch, self.config.feed_dim),
                "keys": self.attention.precompute(encoder_out.out).keys}  # (B, h, S, dh); None: projected queries

    def step(self, token_embedding: torch.Tensor, encoder_out: EncoderOut, state: dict, need_weights: bool = False):
        """One time step: embedding (B, E) -> (a~ (B, d_sm), alpha (B, h, S) or None); updates ``state`` in place.

        The weights are built only with ``need_weights`` (a training step never reads them; record mode forces them
        on the attention). The step is capturable: no host synchronisation and the same shapes at every step (``B``,
        ``S`` fixed by ``encoder_out``), so ``torch.compile(fullgraph=True)`` takes it whole and a CUDA graph can
        replay it (docs/cuda.md)."""
        drop = self.config.dropout
        x = torch.cat([token_embedding, state["feed"]], dim=-1)  # input feeding
        hs, cs = [], []
        # each layer's (B, dh) views; the backward of unbind is one stack, where a select per layer zero-fills and
        # copies its own (B, layers, dh) gradient, and the layers' gradients are then added
        h_prev, c_prev = state["h"].unbind(1), state["c"].unbind(1)
        for layer, cell in enumerate(self.cells):
            h, c = cell(x, (h_prev[layer], c_prev[layer]))
            hs.append(h)
            cs.append(c)
            if layer + 1 < len(self.cells):  # between layers; the attention reads the top layer's h undropped
                x = F.dropout(h, drop, self.training)
        state["h"], state["c"] = torch.stack(hs, dim=1), torch.stack(cs, dim=1)
        memory = LuongMemory(state["keys"], encoder_out.out, encoder_out.lengths)  # batch-first, beams follow
        a_softmax, a_feed, alpha = self.attention(hs[-1], memory, need_weights=need_weights)
        state["feed"] = a_feed
        return a_softmax, alpha


class LSTMModel(nn.Module):
    """``encode``/``decode``/``forward`` as :class:`~mma_nmt.models.transformer.TransformerModel`; the source lengths
    may stay on the host (``lengths_on_host``), where the encoder's packing reads them."""

    lengths_on_host = True  # the trainer leaves src_lengths on the host: encoding never waits for the device

    def __init__(self, config: LSTMConfig):
        super().__init__()
        if config.src_vocab_size <= 0 or config.tgt_vocab_size <= 0:
            raise ValueError("src_vocab_size and tgt_vocab_size must be set (they come from the prepared data)")
        self.config = config
        tgt_embedding = make_embedding(config.tgt_vocab_size, config.embed_dim, config.pad_id)
        src_embedding = tgt_embedding if config.share_embeddings else make_embedding(
            config.src_vocab_size, config.embed_dim, config.pad_id)
        self.encoder = LSTMEncoder(config, src_embedding)
        self.decoder = LSTMDecoder(config, tgt_embedding)
        self.output = nn.Linear(config.softmax_dim, config.tgt_vocab_size, bias=False)
        if config.tie_output:
            if config.embed_dim != config.softmax_dim:
                raise ValueError("tie_output needs embed_dim == softmax_dim")
            self.output.weight = tgt_embedding.weight
        if config.param_init > 0:
            self._uniform_init(config.param_init, config.pad_id)

    @torch.no_grad()
    def _uniform_init(self, bound: float, pad_id: int) -> None:
        """OpenNMT-py's ``-param_init``: every parameter from U(-bound, bound); the padding embeddings stay zero (they
        get no gradient and never reach an output). The attention's weights are drawn in their earlier layout
        (``lstm_attention``), so a seed gives the same model as before."""
        attention = self.decoder.attention
        for parameter in self.parameters():
            if parameter is attention.w_sc:
                init_reference_layout(attention, bound=bound)  # w_sc, w_context and w_state
            elif parameter is not attention.w_context and parameter is not attention.w_state:
                parameter.uniform_(-bound, bound)
        for embedding in (self.encoder.embedding, self.decoder.embedding):  # the same one when shared
            embedding.weight[pad_id].zero_()

    def compile_decoder_step(self, **options) -> None:
        """``train.compile`` for this model: the decoder step (:class:`LSTMStepFunction`) through
        ``torch.compile(**options)``, which training then calls at every target position; the encoder (cuDNN's packed
        LSTM, where Dynamo breaks the graph) and the output layer stay eager.

        Not the whole model: its decoder is a Python loop over the target, which Dynamo unrolls, so a compiled model
        compiles again for every new target length, and after torch's recompile limit (8) trains eagerly without
        an error. A step's shapes depend on the batch size and the source length only, which Dynamo makes dynamic at
        the second shape it sees (``tests/python/models/test_models_lstm_compile.py``). The compiled step is used in
        training mode with gradients on, without weights asked for and without an incremental state; evaluation,
        search and recording run the eager step. It is kept outside the module tree: no state-dict key."""
        self.__dict__["_compiled_step"] = torch.compile(LSTMStepFunction(self.decoder), **options)

    def compile_search_step(self, options: dict | None) -> None:
        """``decode.compile`` for this model: the decoder step of greedy and beam search through
        ``torch.compile(**options)`` (``SearchStepFunction``), or eager again with None. A search keeps the step's
        shapes from step to step (B beams x sentences and S fixed by the encoder output), so ``"reduce-overhead"``
        replays it as CUDA graphs on a GPU, one per (B, S) shape. Used without gradients, without weights asked for and
        with an incremental state, which is how the searches call :meth:`decode`; kept outside the module tree. Asked
        again for the same options, the step compiled before stays, with its graphs."""
        if options is None:
            self.__dict__.pop("_compiled_search_step", None)
            self.__dict__.pop("_search_compile_options", None)
        elif self.__dict__.get("_search_compile_options") != options:
            self.__dict__["_compiled_search_step"] = torch.compile(SearchStepFunction(self.decoder), **options)
            self.__dict__["_search_compile_options"] = dict(options)

    def _compiled_step_for(self, incremental_state, need_weights: bool):
        """The compiled step that serves this :meth:`decode` call, or None for the eager step: the training step's in
        training mode with gradients and no state, the search step's without gradients and with a state."""
        if need_weights:
            return None
        if incremental_state is None:
            return self.__dict__.get("_compiled_step") if self.training and torch.is_grad_enabled() else None
        return None if torch.is_grad_enabled() else self.__dict__.get("_compiled_search_step")

    def encode(self, src: torch.Tensor, src_lengths: torch.Tensor, need_weights: bool = False) -> EncoderOut:
        return self.encoder(src, src_lengths)

    def decode(self, prev_tokens: torch.Tensor, encoder_out: EncoderOut, incremental_state=None,
               need_weights: bool = False, output_mask: torch.Tensor | None = None):
        """prev_tokens (B, T) -> (logits (B, T', V), [alpha (B, h, T', S)] or None); T' = 1 with a state. With
        ``output_mask`` (B, T') bool the logits are those of the True positions only, (N, V)."""
        if incremental_state is not None:
            if "lstm" not in incremental_state:
                incremental_state["lstm"] = self.decoder.initial_state(encoder_out)
            state, prev_tokens = incremental_state["lstm"], prev_tokens[:, -1:]
        else:
            state = self.decoder.initial_state(encoder_out)
        embedded = F.dropout(self.decoder.embedding(prev_tokens), self.config.dropout, self.training)  # (B, T, E)
        compiled_step = self._compiled_step_for(incremental_state, need_weights)
        outputs, alphas = [], []
        for token_embedding in embedded.unbind(1):  # (B, E) per step; one backward node, not one slice per step
            if compiled_step is not None:
                a_softmax, state["h"], state["c"], state["feed"] = compiled_step(
                    *LSTMStepFunction.inputs(token_embedding, encoder_out, state))
                alpha = None
                if incremental_state is not None:
                    # the state outlives the call, and a CUDA graph's next replay overwrites its outputs: copies
                    state["h"], state["c"], state["feed"] = (state[key].clone() for key in ("h", "c", "feed"))
            else:
                a_softmax, alpha = self.decoder.step(token_embedding, encoder_out, state, need_weights=need_weights)
            outputs.append(a_softmax)
            alphas.append(alpha)
        hidden = F.dropout(torch.stack(outputs, dim=1), self.config.dropout, self.training)  # (B, T, d_sm)
        weights = [torch.stack(alphas, dim=2)] if need_weights else None  # [(B, h, T, S)]
        if output_mask is not None:
            hidden = hidden[output_mask]  # (B, T, d_sm) -> (N, d_sm)
        return self.output(hidden), weights

    def forward(self, src: torch.Tensor, src_lengths: torch.Tensor, prev_tokens: torch.Tensor,
                output_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Logits (B, T, V), or (N, V) at the True positions of ``output_mask`` (B, T) bool."""
        return self.decode(prev_tokens, self.encode(src, src_lengths), output_mask=output_mask)[0]
