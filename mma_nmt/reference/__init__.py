"""Plain-PyTorch references of every operator's formula (SPEC), the ground truth of the tests."""

from mma_nmt.reference.attention import attention_reference, visibility_mask
from mma_nmt.reference.dropout_hash import dropout_keep_mask
from mma_nmt.reference.gmm_attention import gmm_attention_reference

__all__ = ["attention_reference", "dropout_keep_mask", "gmm_attention_reference", "visibility_mask"]
