"""The ``mma_nmt`` attention function of transformers' ``AttentionInterface``.

transformers calls it for every attention of a model loaded with ``attn_implementation="mma_nmt"``, as
``fn(module, query (B, H, T, D), key (B, H, S, D), value (B, H, S, Dv), attention_mask, dropout=, scaling=, **kwargs)``,
and expects ``(output (B, T, H, Dv), weights (B, H, T, S) or None)``.

Which calls take the head kinds (the policy, also in docs/huggingface.md):
- an *encoder self-attention* call: the module is neither a decoder nor causal (``module.is_decoder`` and
  ``module.is_causal`` are False: Marian, BART, mBART, M2M100 and Pegasus set both on decoder self-attention and on
  cross-attention, and cross-attention exists only in the decoder), and queries and keys have the same length;
- of a model whose config carries a spec (:func:`mma_nmt.hf.set_head_spec`), in a layer the spec covers: the layer
  index is the module's ``layer_idx`` (BART) or the tag that ``set_head_spec`` / ``restore_head_spec`` put on the
  module (Marian, mBART, M2M100 and Pegasus give their encoder attention no ``layer_idx``); a spec for all layers
  (``layers=None``) needs no index;
- with no position bias, softcap or sliding window among the arguments.
Everything else (decoder self-attention, cross-attention, uncovered encoder layers) goes to transformers' own ``sdpa``
function unchanged, or to eager attention when attention weights are asked for (sdpa returns none).

A covered call runs the fused operator ``torch.ops.mma_nmt.attention`` when the mask hides only right padding of the
keys (it takes per-sentence key lengths). A mask with holes (or left padding) cannot be given to the operator: such a
call computes the same attention in plain PyTorch, the head kinds' visibility combined with the mask, which is slower
but keeps the meaning; with an all-``G`` spec that is exactly sdpa's attention.
"""

from __future__ import annotations

import sys

import torch

from mma_nmt.hf.masks import right_padding_lengths
from mma_nmt.hf.spec import LAYER_TAG, SUPPORTED_MODEL_TYPES, HeadSpec, head_spec_of
from mma_nmt.ops.fused_attention import fused_attention
from mma_nmt.ops.head_spec import parse_head_spec
from mma_nmt.reference.attention import visibility_mask

# Arguments that change the logits in ways the head kinds do not model: a call that has one falls back.
_FALLBACK_ARGUMENTS = ("position_bias", "softcap", "sliding_window", "s_aux", "sinks")


def mma_nmt_attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling: float | None = None,
                      **kwargs):
    spec = _covering_spec(module, query, key, kwargs)
    wants_weights = bool(kwargs.get("output_attentions", False))
    if spec is None:
        return _hf_fallback(module, query, key, value, attention_mask, dropout, scaling, wants_weights, kwargs)
    if kwargs.get("head_mask") is not None:
        raise ValueError("mma_nmt.hf: head_mask (transformers 4.x) is not supported in encoder layers with mixed "
                         "heads; leave it out, or load the model without attn_implementation='mma_nmt'")
    batch, heads, query_len, _ = query.shape
    key_len = key.shape[2]
    kinds = parse_head_spec(spec.head_spec, heads)
    padding = right_padding_lengths(attention_mask, batch, query_len, key_len)
    if padding.right_padding:
        result = fused_attention(query, key, value, head_kinds=kinds,  # head views are read in place
                                 key_lengths=padding.lengths, window=spec.window, scale=scaling, dropout_p=dropout,
                                 return_probs=wants_weights, self_attention=True)  # an encoder self-attention call
        out, weights = result.out, result.probs  # (B, H, T, Dv), (B, H, T, S) or None
    else:
        visible = hf_visibility(attention_mask, module, query_len, key_len, query.device) & visibility_mask(
            kinds, query_len, key_len, window=spec.window, device=query.device)  # (B, H, T, S)
        out, weights = masked_attention(query, key, value, visible, scaling, dropout, module.training)
        weights = weights if wants_weights else None
    return out.transpose(1, 2).contiguous(), weights  # (B, T, H, Dv); no copy where out is position-major (CPU)


def _covering_spec(module, query, key, kwargs) -> HeadSpec | None:
    """The spec when this call is an encoder self-attention in a layer the model's spec covers, else None."""
    config = getattr(module, "config", None)
    spec = head_spec_of(config) if config is not None else None
    if spec is None:
        return None
    if config.model_type not in SUPPORTED_MODEL_TYPES:
        raise ValueError(f"mma_nmt.hf: config.mma_nmt_head_spec is set on a {config.model_type!r} model; head kinds "
                         f"apply to the encoder self-attention of {', '.join(SUPPORTED_MODEL_TYPES)} only")
    if getattr(module, "is_decoder", False) or getattr(module, "is_causal", False):
        return None
    if query.shape[2] != key.shape[2] or any(kwargs.get(name) is not None for name in _FALLBACK_ARGUMENTS):
        return None
    if spec.layers is None:
        return spec
    layer = getattr(module, "layer_idx", None)
    if layer is None:
        layer = getattr(module, LAYER_TAG, None)
    if layer is None:
        raise ValueError(f"mma_nmt.hf: the head spec covers encoder layers {list(spec.layers)}, but "
                         f"{type(module).__name__} does not know its layer index; call "
                         "mma_nmt.hf.restore_head_spec(model) after from_pretrained to mark the layers")
    return spec if spec.covers(layer) else None


def _hf_fallback(module, query, key, value, attention_mask, dropout, scaling, wants_weights, kwargs):
    """transformers' sdpa attention, or the model's eager attention where weights (or 4.x's head_mask) are asked for."""
    if not wants_weights and kwargs.get("head_mask") is None:
        from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

        return ALL_ATTENTION_FUNCTIONS["sdpa"](module, query, key, value, attention_mask, dropout=dropout,
                                               scaling=scaling, **kwargs)
    eager = getattr(sys.modules[type(module).__module__], "eager_attention_forward", None)
    if eager is None:
        raise ValueError(f"mma_nmt.hf: {type(module).__module__} has no eager_attention_forward to return attention "
                         "weights with; leave output_attentions off")
    mask = hf_visibility(attention_mask, module, query.shape[2], key.shape[2], query.device)  # (B or 1, 1, T, S)
    additive = torch.zeros(mask.shape, dtype=query.dtype, device=query.device).masked_fill(
        ~mask, torch.finfo(query.dtype).min)
    return eager(module, query, key, value, additive, dropout=dropout, scaling=scaling, **kwargs)


def hf_visibility(attention_mask, module, query_len: int, key_len: int, device=None) -> torch.Tensor:
    """transformers' mask as a bool (B or 1, 1, T, S) tensor, True where a query may see a key. ``None`` means every
    key, or causal visibility for a causal module (sdpa then relies on its ``is_causal`` flag)."""
    if attention_mask is None:
        if getattr(module, "is_causal", False) and query_len > 1:
            i = torch.arange(query_len, device=device).view(-1, 1) + (key_len - query_len)  # (T, 1) last key seen
            return (torch.arange(key_len, device=device).view(1, -1) <= i).view(1, 1, query_len, key_len)
        return torch.ones(1, 1, query_len, key_len, dtype=torch.bool, device=device)
    if attention_mask.dtype == torch.bool:
        return attention_mask
    return attention_mask > torch.finfo(attention_mask.dtype).min / 2


def masked_attention(query, key, value, visible, scaling, dropout: float, training: bool):
    """Scaled dot-product attention with a bool visibility mask (B, H or 1, T, S); a query that sees no key gets zero
    weights and output. Returns (out (B, H, T, Dv), weights (B, H, T, S))."""
    visible = visible.to(query.device)
    if scaling is None:
        scaling = query.shape[-1] ** -0.5
    logits = torch.matmul(query, key.transpose(-1, -2)) * scaling  # (B, H, T, S)
    logits = logits.masked_fill(~visible, float("-inf"))
    has_key = visible.any(dim=-1, keepdim=True)  # (B, H, T, 1)
    logits = torch.where(has_key, logits, torch.zeros_like(logits))  # keeps softmax finite on rows with no key
    weights = torch.softmax(logits, dim=-1) * visible
    dropped = torch.nn.functional.dropout(weights, p=dropout, training=training)
    return torch.matmul(dropped, value), weights
