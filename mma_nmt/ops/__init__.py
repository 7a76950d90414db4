"""Functional API of the fused operators (``torch.ops.mma_nmt.*`` with fake kernels and autograd registered)."""

from mma_nmt.ops.fused_attention import AttentionResult, fused_attention
from mma_nmt.ops.gmm_attention import GmmAttentionResult, gmm_attention
from mma_nmt.ops.head_spec import HeadKind, format_head_spec, parse_head_spec
from mma_nmt.ops.padding import lengths_from_padding_mask, padding_mask_from_lengths

__all__ = [
    "AttentionResult",
    "HeadKind",
    "format_head_spec",
    "fused_attention",
    "GmmAttentionResult",
    "gmm_attention",
    "lengths_from_padding_mask",
    "padding_mask_from_lengths",
    "parse_head_spec",
]

# ---- multi-hop attention and multi-head Luong attention (SPEC sections 2 and 4) ----
from mma_nmt.ops.multihop import HeadGateResult, multihop_gate  # noqa: E402
from mma_nmt.ops.second_hop import SecondHopResult, multihop_second_hop  # noqa: E402
from mma_nmt.ops.shared_value_attention import SharedValueResult, shared_value_attention  # noqa: E402

__all__ += ["HeadGateResult", "SecondHopResult", "SharedValueResult", "multihop_gate", "multihop_second_hop",
            "shared_value_attention"]

# ---- multi-layer multi-head attention (SPEC section 3) ----
from mma_nmt.ops.multilayer_attention import MultilayerAttentionResult, multilayer_attention  # noqa: E402

__all__ += ["MultilayerAttentionResult", "multilayer_attention"]
