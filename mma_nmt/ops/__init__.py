"""Functional API of the fused operators (``torch.ops.mma_nmt.*`` with fake kernels and autograd registered through
:mod:`mma_nmt.ops.registration`)."""

from mma_nmt.ops.fused_attention import AttentionResult, fused_attention
from mma_nmt.ops.gmm_attention import GmmAttentionResult, gmm_attention
from mma_nmt.ops.head_spec import HeadKind, format_head_spec, parse_head_spec
from mma_nmt.ops.multihop import HeadGateResult, multihop_gate
from mma_nmt.ops.multilayer_attention import MultilayerAttentionResult, multilayer_attention
from mma_nmt.ops.padding import lengths_from_padding_mask, padding_mask_from_lengths
from mma_nmt.ops.second_hop import SecondHopResult, multihop_second_hop
from mma_nmt.ops.shared_value_attention import SharedValueResult, shared_value_attention

__all__ = [
    "AttentionResult",
    "GmmAttentionResult",
    "HeadGateResult",
    "HeadKind",
    "MultilayerAttentionResult",
    "SecondHopResult",
    "SharedValueResult",
    "format_head_spec",
    "fused_attention",
    "gmm_attention",
    "lengths_from_padding_mask",
    "multihop_gate",
    "multihop_second_hop",
    "multilayer_attention",
    "padding_mask_from_lengths",
    "parse_head_spec",
    "shared_value_attention",
]
