"""``nn.Module`` wrappers of the fused operators."""

from mma_nmt.modules.gmm_cross_attention import GmmAttentionConfig, GmmCrossAttention
from mma_nmt.modules.mixed_multihead_attention import MixedAttentionConfig, MixedMultiheadAttention

__all__ = ["GmmAttentionConfig", "GmmCrossAttention", "MixedAttentionConfig", "MixedMultiheadAttention"]
