"""Plain-PyTorch references of every operator's formula (SPEC), the ground truth of the tests."""

from mma_nmt.reference.attention import attention_reference, visibility_mask
from mma_nmt.reference.dropout_hash import dropout_keep_mask
from mma_nmt.reference.gmm_attention import gmm_attention_reference
from mma_nmt.reference.luong_attention import luong_attention_reference, shared_value_attention_reference
from mma_nmt.reference.multihop import head_gate_reference, second_hop_reference
from mma_nmt.reference.multilayer_attention import multilayer_attention_op_reference, multilayer_attention_reference

__all__ = [
    "attention_reference", "dropout_keep_mask", "gmm_attention_reference", "head_gate_reference",
    "luong_attention_reference", "multilayer_attention_op_reference", "multilayer_attention_reference",
    "second_hop_reference", "shared_value_attention_reference", "visibility_mask",
]
