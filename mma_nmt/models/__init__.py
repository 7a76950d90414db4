"""Encoder-decoder models (Transformer, LSTM) behind one incremental-decoding contract (see ``incremental``)."""

from mma_nmt.models.config import DecoderConfig, EncoderConfig, LSTMConfig, ModelConfig, TransformerConfig
from mma_nmt.models.factory import build_model
from mma_nmt.models.incremental import EncoderOut, reorder_incremental_state
from mma_nmt.models.presets import PRESETS, preset

__all__ = ["DecoderConfig", "EncoderConfig", "EncoderOut", "LSTMConfig", "ModelConfig", "PRESETS", "TransformerConfig",
           "build_model", "preset", "reorder_incremental_state"]
