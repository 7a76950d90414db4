"""Attention masks between transformers and the fused operator.

Since transformers 5, a model builds its masks through ``AttentionMaskInterface`` under the name of its attention
implementation, and builds none for a name registered there without a mask function (transformers issue 45811): a
custom attention function would then see ``attention_mask=None`` and attend to padding. :func:`register_mask_function`
registers sdpa's mask function under our name, so our attention function receives exactly the masks sdpa would, and
passes them on unchanged when it falls back to sdpa. transformers 4.5x builds the masks of Marian, BART, mBART,
M2M100 and Pegasus in the model code: there our function receives eager's additive float masks.

The fused operator takes key padding as per-sentence lengths, so :func:`right_padding_lengths` reads a mask back into
lengths where it hides nothing but right padding of the keys, and says it cannot otherwise.
"""

from __future__ import annotations

from typing import NamedTuple

import torch


def register_mask_function(name: str) -> None:
    """Registers sdpa's mask function as the mask function of attention implementation ``name``."""
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

    sdpa = AttentionMaskInterface._global_mapping["sdpa"]
    AttentionMaskInterface.register(name, sdpa)
    assert ALL_MASK_ATTENTION_FUNCTIONS[name] is sdpa


class KeyPadding(NamedTuple):
    right_padding: bool  # False: the mask hides more than right padding of the keys (holes, a causal or custom mask)
    lengths: torch.Tensor | None  # (B,) int64 real keys per sentence; None when every key is real


def right_padding_lengths(mask, batch: int, query_len: int, key_len: int) -> KeyPadding:
    """Reads an HF attention mask for queries (B, T) over keys (B, S): ``None``, a bool mask (True = visible) or an
    additive float mask (0 visible, the dtype's minimum hidden), of shape (B or 1, 1, T or 1, S)."""
    if mask is None:
        return KeyPadding(True, None)
    if not isinstance(mask, torch.Tensor) or mask.dim() != 4 or mask.shape[1] != 1 or mask.shape[3] != key_len \
            or mask.shape[0] not in (1, batch) or mask.shape[2] not in (1, query_len):
        return KeyPadding(False, None)  # a BlockMask, per-head masks, or a layout we do not know
    if mask.dtype == torch.bool:
        visible = mask
    elif mask.is_floating_point():
        visible = mask == 0
        hidden = mask <= torch.finfo(mask.dtype).min / 2
        if not bool((visible | hidden).all()):
            return KeyPadding(False, None)  # a bias on the logits (ALiBi-like), not a mask
    else:
        return KeyPadding(False, None)
    visible = visible[:, 0]  # (B', T', S)
    first_row = visible[:, :1]  # (B', 1, S)
    if not bool((visible == first_row).all()):
        return KeyPadding(False, None)  # rows differ: causal or another query-dependent mask
    keys = first_row[:, 0]  # (B', S) which keys are real
    lengths = keys.sum(dim=-1)  # (B',)
    positions = torch.arange(key_len, device=keys.device)
    if not torch.equal(positions.unsqueeze(0) < lengths.unsqueeze(1), keys) or not bool((lengths > 0).all()):
        return KeyPadding(False, None)  # holes, left padding, or a sentence with no key
    if bool((lengths == key_len).all()):
        return KeyPadding(True, None)
    return KeyPadding(True, lengths.to(torch.int64).expand(batch).contiguous())
