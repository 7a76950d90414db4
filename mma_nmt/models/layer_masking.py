"""Test-time layer masking of MLMHA models (the MLMHA paper's Table 7): zero one encoder layer's output where the
decoder's multi-layer cross-attention reads it."""

from __future__ import annotations

import contextlib
from typing import Iterator

from torch import nn

from mma_nmt.modules import SourceFeatureCollector


def feature_collectors(model: nn.Module) -> list[SourceFeatureCollector]:
    """Every MLMHA collector of encoder layer outputs in ``model`` (one per decoder layer)."""
    return [m for m in model.modules() if isinstance(m, SourceFeatureCollector)]


@contextlib.contextmanager
def masked_encoder_layer(model: nn.Module, layer: int | None) -> Iterator[None]:
    """Inside the block, every MLMHA cross-attention of ``model`` reads zeros instead of encoder layer ``layer``
    (1-based; ``None`` masks nothing). A layer below the ``mlmha_n`` layers read is not seen by the decoder at all,
    so masking it changes nothing."""
    collectors = feature_collectors(model)
    if not collectors:
        raise ValueError("model has no multi-layer (MLMHA) cross-attention to mask; build it with "
                         "decoder.cross_attention='mlmha'")
    layers = collectors[0].num_encoder_layers
    if layer is not None and not 1 <= layer <= layers:
        raise ValueError(f"layer must lie in [1, {layers}] or be None, got {layer}")
    previous = [c.masked_layer for c in collectors]
    try:
        for collector in collectors:
            collector.masked_layer = layer
        yield
    finally:
        for collector, value in zip(collectors, previous):
            collector.masked_layer = value
