"""``nn.MultiheadAttention``'s mask arguments (``attn_mask``, ``key_padding_mask``, ``is_causal``) in mma_nmt's terms.

torch's documented meanings: a boolean mask is True where a query may *not* attend; a float mask is added to the
logits (``-inf`` hides a key); ``attn_mask`` is (T, S), shared by the batch, or (B*H, T, S), one per sentence and
head; ``key_padding_mask`` is (B, S); ``is_causal=True`` is only a hint that ``attn_mask`` *is* the causal mask, so it
needs ``attn_mask``. What the fused operator can take directly becomes key lengths (a boolean ``key_padding_mask``
that marks right padding) and head kind ``C`` (a causal ``attn_mask`` on global heads); anything else becomes a float
logit bias that the plain-PyTorch formula (:func:`~mma_nmt.reference.attention_reference`) adds to the logits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from mma_nmt.ops.head_spec import HeadKind
from mma_nmt.ops.padding import check_padding_mask_shape, lengths_from_padding_mask, right_padding_lengths


@dataclass
class TorchMasks:
    key_lengths: torch.Tensor | None  # (B,) int64: the key_padding_mask when it marks right padding only
    causal: bool  # attn_mask is exactly the causal mask (query i sees keys j <= i)
    logit_bias: torch.Tensor | None  # float, broadcastable to (B, H, T, S), -inf = hidden: everything else


def causal_head_kinds(head_kinds: Sequence[int]) -> list[int] | None:
    """The head kinds that see what ``head_kinds`` see *and* only keys ``j <= i``, or None when one of them has no
    such kind: global and causal heads become causal, backward heads stay; local and forward heads have none."""
    kinds = []
    for kind in head_kinds:
        if kind in (HeadKind.GLOBAL, HeadKind.CAUSAL):
            kinds.append(int(HeadKind.CAUSAL))
        elif kind == HeadKind.BACKWARD:
            kinds.append(int(kind))
        else:
            return None
    return kinds


def causal_bias(query_len: int, key_len: int, *, dtype: torch.dtype, device) -> torch.Tensor:
    """(T, S) float: 0 where ``j <= i``, -inf elsewhere (``nn.Transformer.generate_square_subsequent_mask``)."""
    hidden = torch.ones(query_len, key_len, dtype=torch.bool, device=device).triu(1)  # (T, S) True at j > i
    return torch.zeros(query_len, key_len, dtype=dtype, device=device).masked_fill(hidden, float("-inf"))


def _as_bias(op: str, name: str, mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """torch's boolean (True = hidden) or float (added) mask as a float bias."""
    if mask.dtype == torch.bool:
        return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(mask, float("-inf"))
    if not mask.is_floating_point():
        raise TypeError(f"{op}: {name} must be a bool tensor (True = not attended) or a float tensor (added to the "
                        f"logits), got {mask.dtype}")
    return mask.to(dtype)


def _attn_mask_bias(op: str, attn_mask: torch.Tensor, *, batch: int, heads: int, query_len: int, key_len: int,
                    dtype: torch.dtype) -> torch.Tensor:
    """``attn_mask`` (T, S) or (B*H, T, S) as a float bias (1, 1, T, S) or (B, H, T, S)."""
    shapes = {2: (query_len, key_len), 3: (batch * heads, query_len, key_len)}
    if tuple(attn_mask.shape) != shapes.get(attn_mask.dim()):
        raise ValueError(f"{op}: attn_mask must have shape (query_len, key_len) = {shapes[2]} or "
                         f"(batch * num_heads, query_len, key_len) = {shapes[3]}, got {tuple(attn_mask.shape)}")
    bias = _as_bias(op, "attn_mask", attn_mask, dtype)
    return bias.view(-1, heads if bias.dim() == 3 else 1, query_len, key_len)  # (B|1, H|1, T, S)


def resolve_torch_masks(
    op: str,
    *,
    attn_mask: torch.Tensor | None,
    key_padding_mask: torch.Tensor | None,
    is_causal: bool,
    batch: int,
    heads: int,
    query_len: int,
    key_len: int,
    query_offset: int,
    dtype: torch.dtype,
) -> TorchMasks:
    """Reads the three arguments with torch's meanings (see the module docstring); ``op`` names the module in errors.
    A causal ``attn_mask`` is recognised only with ``query_offset == 0`` (its rows are the queries' own positions)."""
    if is_causal and attn_mask is None:
        raise ValueError(f"{op}: is_causal=True is a hint that attn_mask is the causal mask (torch's meaning), so it "
                         f"needs attn_mask too, e.g. nn.Transformer.generate_square_subsequent_mask({query_len})")
    key_lengths, bias = None, None
    if key_padding_mask is not None:
        check_padding_mask_shape(op, key_padding_mask, batch, key_len)
        # A right-padding mask becomes lengths, any other mask a bias. Under torch.compile the mask is taken as right
        # padding, as the modules always did (lengths_from_padding_mask checks it); a data-dependent branch would
        # break the graph.
        if key_padding_mask.dtype == torch.bool:
            key_lengths = (lengths_from_padding_mask(key_padding_mask) if torch.compiler.is_compiling()
                           else right_padding_lengths(key_padding_mask))
        if key_lengths is None:
            bias = _as_bias(op, "key_padding_mask", key_padding_mask, dtype).view(batch, 1, 1, key_len)  # (B,1,1,S)
    causal = False
    if attn_mask is not None:
        mask_bias = _attn_mask_bias(op, attn_mask, batch=batch, heads=heads, query_len=query_len, key_len=key_len,
                                    dtype=dtype)
        causal = attn_mask.dim() == 2 and query_len == key_len and torch.equal(
            mask_bias[0, 0], causal_bias(query_len, key_len, dtype=dtype, device=mask_bias.device))
        if is_causal and not causal:
            raise ValueError(f"{op}: is_causal=True but attn_mask is not the causal mask (True / -inf exactly above "
                             f"the diagonal of a square (T, T) mask); pass is_causal=False to use this attn_mask")
        if not causal or query_offset != 0:
            causal = False
            bias = mask_bias if bias is None else bias + mask_bias  # (B|1, H|1, T, S)
    return TorchMasks(key_lengths=key_lengths, causal=causal, logit_bias=bias)
