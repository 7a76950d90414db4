"""Builds a model from its config."""

from __future__ import annotations

from torch import nn

from mma_nmt.models.config import LSTMConfig, ModelConfig, TransformerConfig


def build_model(config: ModelConfig) -> nn.Module:
    if isinstance(config, TransformerConfig):
        from mma_nmt.models.transformer import TransformerModel
        return TransformerModel(config)
    if isinstance(config, LSTMConfig):
        from mma_nmt.models.lstm import LSTMModel
        return LSTMModel(config)
    raise TypeError(f"unknown model config type {type(config).__name__}")
