"""Named model presets matching the papers (sizes only; vocabulary sizes come from the prepared data)."""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

from mma_nmt.models.config import DecoderConfig, EncoderConfig, LSTMConfig, TransformerConfig


def _transformer(d_model: int, ffn: int, heads: int, layers: tuple[int, int], dropout: float, *,
                 self_attn: dict | None = None, cross: dict | None = None, **kw) -> TransformerConfig:
    """``self_attn`` / ``cross``: extra fields of the encoder / decoder config (attention kind and its settings)."""
    return TransformerConfig(d_model=d_model, ffn_dim=ffn, heads=heads, dropout=dropout,
                             encoder=EncoderConfig(layers=layers[0], **(self_attn or {})),
                             decoder=DecoderConfig(layers=layers[1], **(cross or {})), **kw)


PRESETS: dict[str, Callable[[], TransformerConfig | LSTMConfig]] = {
    # IWSLT "small" Transformer of the MMA paper: 512/1024/4 heads, 6+6 layers, dropout 0.3.
    "transformer_iwslt_small": lambda: _transformer(512, 1024, 4, (6, 6), 0.3),
    # Vaswani et al. base and big.
    "transformer_base": lambda: _transformer(512, 2048, 8, (6, 6), 0.1),
    "transformer_big": lambda: _transformer(1024, 4096, 16, (6, 6), 0.3),
    # MLMHA paper's IWSLT configuration: 256/1024/4 heads, 4+4 layers.
    "transformer_mlmha_iwslt": lambda: _transformer(256, 1024, 4, (4, 4), 0.3),
    # The same with the attention of its paper: MLMHA M-11 over all encoder layers in every decoder layer.
    "transformer_mlmha_iwslt_m11": lambda: _transformer(
        256, 1024, 4, (4, 4), 0.3, cross=dict(cross_attention="mlmha", mlmha_variant="M-11")),
    # Multi-hop paper: Transformer base with the second hop in encoder layer 4 of 6 (0-based 3).
    "transformer_multihop_base": lambda: _transformer(512, 2048, 8, (6, 6), 0.1, self_attn=dict(
        attention="multihop", multihop_layers=[3])),
    # GMM paper on IWSLT: the small Transformer with GMM cross-attention (K = 4, approximate normalisation) everywhere.
    "transformer_gmm_iwslt_small": lambda: _transformer(512, 1024, 4, (6, 6), 0.3, cross=dict(
        cross_attention="gmm", gmm_variant="approximate", gmm_components=4)),
    # Small enough for tests and for minutes of CPU training.
    "transformer_tiny": lambda: _transformer(128, 256, 4, (2, 2), 0.1, max_positions=256),
    # Multi-head Luong LSTM paper, IWSLT'15 En-Vi: 1024-d embeddings/states, 2+2 layers, d_sm 512, d_fd 1024, 4 heads.
    "lstm_iwslt15": lambda: LSTMConfig(embed_dim=1024, hidden_size=1024, layers=2, heads=4, softmax_dim=512,
                                       feed_dim=1024, dropout=0.5),
    # Its WMT'16 En-De setting (Table 7): 4+4 layers, d_sm 1024.
    "lstm_wmt16": lambda: LSTMConfig(embed_dim=1024, hidden_size=1024, layers=4, heads=4, softmax_dim=1024,
                                     feed_dim=1024, dropout=0.5),
    # The IWSLT'15 setting at 1/8 of the width for minutes of CPU training (the experiments' mini scale): 128-d
    # embeddings/states, 2+2 layers, d_sm 64 = dh / 2 and d_fd 128 = dh as in the paper; 1.28M parameters
    # with 2,000-piece vocabularies (transformer_tiny: 0.92M).
    "lstm_mini": lambda: LSTMConfig(embed_dim=128, hidden_size=128, layers=2, heads=4, softmax_dim=64, feed_dim=128,
                                    dropout=0.1),
    "lstm_tiny": lambda: LSTMConfig(embed_dim=64, hidden_size=128, layers=1, heads=2, softmax_dim=64, feed_dim=64,
                                    dropout=0.1),
}


def preset(name: str, **overrides) -> TransformerConfig | LSTMConfig:
    """A fresh config of preset ``name`` with top-level fields replaced by ``overrides``."""
    if name not in PRESETS:
        raise ValueError(f"unknown model preset {name!r}; known: {sorted(PRESETS)}")
    return replace(PRESETS[name](), **overrides)
