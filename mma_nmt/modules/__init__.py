"""``nn.Module`` wrappers of the fused operators."""

from mma_nmt.modules.gmm_cross_attention import GmmAttentionConfig, GmmCrossAttention
from mma_nmt.modules.layer_aggregation import (
    IterativeFeatureCombination,
    LinearFeatureCombination,
    TransparentAttention,
)
from mma_nmt.modules.luong_attention import LuongAttentionConfig, LuongMemory, LuongMultiheadAttention
from mma_nmt.modules.mixed_multihead_attention import MixedAttentionConfig, MixedMultiheadAttention
from mma_nmt.modules.multihop_attention import (
    MultiHopAttentionConfig,
    MultiHopPlacement,
    MultiHopSelfAttention,
    MultiHopWeights,
    encoder_self_attention,
    second_hop_parameter_count,
)
from mma_nmt.modules.multilayer_attention import (
    MultiLayerAttentionConfig,
    MultiLayerMultiheadAttention,
    SourceFeatureCollector,
)

__all__ = [
    "GmmAttentionConfig", "GmmCrossAttention", "IterativeFeatureCombination", "LinearFeatureCombination",
    "LuongAttentionConfig", "LuongMemory", "LuongMultiheadAttention", "MixedAttentionConfig", "MixedMultiheadAttention",
    "MultiHopAttentionConfig", "MultiHopPlacement", "MultiHopSelfAttention", "MultiHopWeights",
    "MultiLayerAttentionConfig", "MultiLayerMultiheadAttention", "SourceFeatureCollector", "TransparentAttention",
    "encoder_self_attention", "second_hop_parameter_count",
]
