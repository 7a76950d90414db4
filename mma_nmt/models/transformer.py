"""Transformer encoder-decoder whose attention is chosen per place by config (see ``attention_factory``)."""

from __future__ import annotations

import math
from dataclasses import replace

import torch
from torch import nn
from torch.nn import functional as F

from mma_nmt.models.attention_factory import build_layer_aggregation, reads_lower_layers
from mma_nmt.models.config import TransformerConfig
from mma_nmt.models.incremental import EncoderOut
from mma_nmt.models.transformer_layers import DecoderLayer, EncoderLayer, sinusoidal_positions

DECODER_SOURCES = "decoder_sources"  # EncoderOut.extra key of per-decoder-layer sources (B, M, S, E)


def make_embedding(vocab_size: int, dim: int, pad_id: int) -> nn.Embedding:
    embedding = nn.Embedding(vocab_size, dim, padding_idx=pad_id)
    nn.init.normal_(embedding.weight, mean=0.0, std=dim ** -0.5)
    with torch.no_grad():
        embedding.weight[pad_id].zero_()
    return embedding


class TransformerEmbedding(nn.Module):
    """Token embedding scaled by sqrt(d_model), plus (optionally) sinusoidal positions, then dropout."""

    def __init__(self, embedding: nn.Embedding, config: TransformerConfig, positions: bool):
        super().__init__()
        self.embedding = embedding
        self.scale = math.sqrt(config.d_model)
        self.dropout = config.dropout
        self.use_positions = positions
        self.register_buffer("positions", sinusoidal_positions(config.max_positions, config.d_model), persistent=False)

    def forward(self, tokens: torch.Tensor, start: int = 0) -> torch.Tensor:
        """tokens (B, T) at positions start..start+T-1 -> (B, T, E)."""
        x = self.embedding(tokens) * self.scale
        if self.use_positions:
            end = start + tokens.shape[1]
            if end > self.positions.shape[0]:
                raise ValueError(f"sequence of length {end} exceeds max_positions={self.positions.shape[0]}")
            x = x + self.positions[start:end].to(x.dtype)
        return F.dropout(x, self.dropout, self.training)


class TransformerModel(nn.Module):
    """``encode(src, src_lengths) -> EncoderOut``; ``decode(prev_tokens, encoder_out, incremental_state)``;
    ``forward(src (B, S), src_lengths (B,), prev_tokens (B, T)) -> logits (B, T, V)``."""

    def __init__(self, config: TransformerConfig):
        super().__init__()
        if config.src_vocab_size <= 0 or config.tgt_vocab_size <= 0:
            raise ValueError("src_vocab_size and tgt_vocab_size must be set (they come from the prepared data)")
        if config.share_embeddings and config.src_vocab_size != config.tgt_vocab_size:
            raise ValueError("share_embeddings needs a joint vocabulary (src_vocab_size == tgt_vocab_size)")
        self.config = config
        tgt_embedding = make_embedding(config.tgt_vocab_size, config.d_model, config.pad_id)
        src_embedding = tgt_embedding if config.share_embeddings else make_embedding(
            config.src_vocab_size, config.d_model, config.pad_id)
        self.src_embed = TransformerEmbedding(src_embedding, config, positions=config.encoder.positional_embedding)
        self.tgt_embed = TransformerEmbedding(tgt_embedding, config, positions=True)
        self.encoder_layers = nn.ModuleList(EncoderLayer(config, i) for i in range(config.encoder.layers))
        self.decoder_layers = nn.ModuleList(DecoderLayer(config, i) for i in range(config.decoder.layers))
        self.aggregation = build_layer_aggregation(config)
        self.encoder_norm = nn.LayerNorm(config.d_model) if config.pre_norm else None
        self.decoder_norm = nn.LayerNorm(config.d_model) if config.pre_norm else None
        # Under pre-norm a layer's own output is the unnormalised residual stream. The multi-layer attention and the
        # layer aggregations of the MLMHA paper read every layer's output, which post-norm normalises; so each layer
        # below the top gets its own LayerNorm for them (the top one has encoder_norm).
        self.lower_layer_norms = None
        if config.pre_norm and reads_lower_layers(config):
            self.lower_layer_norms = nn.ModuleList(nn.LayerNorm(config.d_model)
                                                   for _ in range(config.encoder.layers - 1))
        self.output = None
        if not config.tie_output:
            self.output = nn.Linear(config.d_model, config.tgt_vocab_size, bias=False)
            nn.init.normal_(self.output.weight, mean=0.0, std=config.d_model ** -0.5)

    def encode(self, src: torch.Tensor, src_lengths: torch.Tensor, need_weights: bool = False) -> EncoderOut:
        """src (B, S) token ids, src_lengths (B,). With ``need_weights`` the self-attention weights (B, H, S, S) of
        layer i are in ``extra[f"self_attn.{i}"]``. With ``encoder.layer_aggregation``, ``out`` is the aggregated
        representation (``layer_states`` stay the layers' own outputs, each normalised under pre-norm when the decoder
        reads them), or for ``"transparent"`` the per-decoder-layer sources are in ``extra[DECODER_SOURCES]``
        (B, M, S, E)."""
        x = embedded = self.src_embed(src)
        states, extra = [], {}
        for i, layer in enumerate(self.encoder_layers):
            x, weights = layer(x, src_lengths, need_weights=need_weights)
            states.append(x)
            if weights is not None:
                extra[f"self_attn.{i}"] = weights
        if self.encoder_norm is not None:
            x = self.encoder_norm(x)
            states[-1] = x
        if self.lower_layer_norms is not None:
            states[:-1] = [norm(state) for norm, state in zip(self.lower_layer_norms, states[:-1])]
        if self.aggregation is not None:
            joint = self.aggregation(embedded, states)
            if joint.dim() == 4:
                extra[DECODER_SOURCES] = joint
            else:
                x = joint
        return EncoderOut(out=x, lengths=src_lengths, layer_states=states, extra=extra)

    def decode(self, prev_tokens: torch.Tensor, encoder_out: EncoderOut, incremental_state=None,
               need_weights: bool = False, output_mask: torch.Tensor | None = None):
        """prev_tokens (B, T) starting with BOS -> (logits (B, T', V), cross-attention weights or None).

        With ``incremental_state`` only the last token is fed (T' = 1). Weights are a list over decoder layers of
        (B, H, T', S) tensors. With ``output_mask`` (B, T') bool the logits are those of the True positions only,
        (N, V)."""
        start = 0
        if incremental_state is not None:
            start = prev_tokens.shape[1] - 1
            prev_tokens = prev_tokens[:, -1:]
        x = self.tgt_embed(prev_tokens, start=start)
        all_weights = []
        sources = encoder_out.extra.get(DECODER_SOURCES)  # (B, M, S, E) or None
        for j, layer in enumerate(self.decoder_layers):
            source = encoder_out if sources is None else replace(encoder_out, out=sources[:, j])
            x, weights = layer(x, source, incremental_state, need_weights=need_weights)
            all_weights.append(weights)
        if self.decoder_norm is not None:
            x = self.decoder_norm(x)
        if output_mask is not None:
            x = x[output_mask]  # (B, T', E) -> (N, E)
        return self.output_layer(x), (all_weights if need_weights else None)

    def output_layer(self, x: torch.Tensor) -> torch.Tensor:
        """Decoder states (..., E) -> logits (..., V)."""
        weight = self.tgt_embed.embedding.weight if self.output is None else self.output.weight
        return F.linear(x, weight)

    def forward(self, src: torch.Tensor, src_lengths: torch.Tensor, prev_tokens: torch.Tensor,
                output_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Logits (B, T, V); with ``output_mask`` (B, T) bool only those of the True positions, (N, V) in row-major
        order (training needs no logits at padding: the output layer and the loss are the largest parts of a step)."""
        return self.decode(prev_tokens, self.encode(src, src_lengths), output_mask=output_mask)[0]
