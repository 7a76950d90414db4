"""``nn.Module`` wrappers of the fused operators."""

from mma_nmt.modules.mixed_multihead_attention import MixedAttentionConfig, MixedMultiheadAttention

__all__ = ["MixedAttentionConfig", "MixedMultiheadAttention"]

# ---- multi-layer, multi-hop and multi-head Luong attention (SPEC sections 2-4) ----
from mma_nmt.modules.layer_aggregation import (  # noqa: E402
    IterativeFeatureCombination,
    LinearFeatureCombination,
    TransparentAttention,
)
from mma_nmt.modules.luong_attention import LuongAttentionConfig, LuongMemory, LuongMultiheadAttention  # noqa: E402
from mma_nmt.modules.multihop_attention import (  # noqa: E402
    MultiHopAttentionConfig,
    MultiHopPlacement,
    MultiHopSelfAttention,
    MultiHopWeights,
    encoder_self_attention,
    second_hop_parameter_count,
)
from mma_nmt.modules.multilayer_attention import (  # noqa: E402
    MultiLayerAttentionConfig,
    MultiLayerMultiheadAttention,
    SourceFeatureCollector,
)

__all__ += [
    "IterativeFeatureCombination", "LinearFeatureCombination", "LuongAttentionConfig", "LuongMemory",
    "LuongMultiheadAttention", "MultiHopAttentionConfig", "MultiHopPlacement", "MultiHopSelfAttention",
    "MultiHopWeights", "MultiLayerAttentionConfig", "MultiLayerMultiheadAttention", "SourceFeatureCollector",
    "TransparentAttention", "encoder_self_attention", "second_hop_parameter_count",
]
