"""``mma_nmt::multilayer_attention``: MLMHA's attention over the top n encoder layers (SPEC section 3), read from the
per-layer projections in place.

The kernels live in ``csrc/multilayer/`` (the CPU one gathers each head's rows from the projections into cache and runs
the attention kernel's blocks on them; the CUDA one arranges the projections for ``mma_nmt::attention``). This file
adds the functional API, the fake (meta) kernels and autograd, whose backward is
``mma_nmt::multilayer_attention_backward``.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import torch

from mma_nmt.ops.argument_checks import check_optional_tensor
from mma_nmt.ops.argument_defaults import default_scale
from mma_nmt.ops.device_checks import check_same_device
from mma_nmt.ops.fake_layout import contiguous_like, statistics_dtype
from mma_nmt.ops.registration import backward_operator, register_operator

_BACKWARD_OP = backward_operator("multilayer_attention")
# Sources of at most this many tokens fit one key tile of the CPU kernel (kKeyTile, csrc/attention/cpu/
# attention_blocks.h), which then writes the weights without recomputing the logits. Training keeps them for the
# backward, which so skips recomputing q k^T: a product over n*D values (MLMHA's joint heads are n times wider than a
# layer's). Longer sources recompute, as flash attention does, instead of storing (B, heads', T, S) weights.
_SAVED_WEIGHTS_MAX_KEYS = 128


class MultilayerAttentionResult(NamedTuple):
    out: torch.Tensor  # (B, T, sets * Ev): the concatenated contexts [c_1 .. c_sets]
    lse: torch.Tensor  # (B, heads', T) log-sum-exp of each query's logits; -inf for a sentence without keys
    probs: torch.Tensor | None  # (B, heads', T, S) attention weights, only when asked for


def multilayer_attention(q: Sequence[torch.Tensor], k: Sequence[torch.Tensor], v: Sequence[torch.Tensor], *,
                         num_heads: int, layer_specific: bool = False, key_lengths: torch.Tensor | None = None,
                         scale: float | None = None, return_probs: bool = False) -> MultilayerAttentionResult:
    """Context of the n encoder layers before the output projection.

    Args:
        q, k: n tensors each, layer i's projected queries (B, T, E) and keys (B, S, E), E = num_heads * D.
        v: n value projections (B, S, Ev); or, with joint weights, one (the sum over layers: ``p sum_i v_i``).
        layer_specific: False for joint weights ``softmax(sum_i q_i k_i^T * scale)`` per head (U0 = 0), True for one
            softmax per layer and head (U0 = 1).
        key_lengths: (B,) int64 real source lengths.
        scale: logit scale, ``1/sqrt(D)`` by default.
        return_probs: also return the weights (for analysis; not differentiable).

    Returns ``out`` (B, T, sets * Ev) with sets = len(v) for joint weights and n for layer-specific ones: set j's
    context of head h is columns ``[j*Ev + h*Dv, j*Ev + (h+1)*Dv)``; summing the sets gives U1 = 1's ``sum_i c_i``.
    ``lse``/``probs`` have num_heads heads (joint) or n * num_heads (layer i's head h at ``i * num_heads + h``).
    """
    q, k, v = list(q), list(k), list(v)
    if not q:  # the dispatcher needs a tensor to pick a device ("There were no tensor arguments to this function")
        raise ValueError("mma_nmt.multilayer_attention: q must hold one tensor per encoder layer, got none")
    check_optional_tensor("mma_nmt.multilayer_attention", "key_lengths", key_lengths, "a (batch,) int64 tensor")
    if scale is None:
        embed = q[0].shape[-1] if q[0].dim() == 3 else 0
        scale = default_scale(embed // num_heads if num_heads > 0 else 0)
    training = torch.is_grad_enabled() and any(x.requires_grad for x in (*q, *k, *v))
    save_weights = (training and q and q[0].device.type == "cpu" and k and k[0].dim() == 3
                    and k[0].shape[1] <= _SAVED_WEIGHTS_MAX_KEYS)
    out, lse, probs = _OPERATOR(q, k, v, key_lengths, num_heads, float(scale), layer_specific,
                                return_probs or save_weights)
    return MultilayerAttentionResult(out, lse, probs if return_probs else None)


def _fake_sizes(op, q, k, v, key_lengths, num_heads, layer_specific):
    """The checks of csrc/multilayer/multilayer_checks.cpp that fake tensors allow, with the same messages; returns
    (batch, query_len, key_len, output width, heads')."""
    torch._check_value(len(q) > 0, lambda: f"{op}: q must hold one tensor per encoder layer, got none")
    torch._check_value(len(k) == len(q), lambda: f"{op}: k must hold one tensor per layer like q ({len(q)}), "
                                                 f"got {len(k)}")
    torch._check_value(len(v) == len(q) or (len(v) == 1 and not layer_specific),
                       lambda: f"{op}: v must hold one tensor per layer like q ({len(q)}), got {len(v)}")
    torch._check_value(num_heads >= 1, lambda: f"{op}: num_heads must be >= 1, got {num_heads}")
    q0 = q[0]
    layouts = {"q[0]": "(batch, query_len, embed_dim)", "k[0]": "(batch, key_len, embed_dim)",
               "v[0]": "(batch, key_len, value_embed_dim)"}
    for name, t in (("q[0]", q0), ("k[0]", k[0]), ("v[0]", v[0])):
        torch._check_value(t.dim() == 3, lambda: f"{op}: {name} must have shape {layouts[name]}, got a {t.dim()}-d "
                                                 f"tensor of shape {list(t.shape)}")
    batch, query_len, embed = q0.shape
    key_len, value_embed = k[0].shape[1], v[0].shape[2]
    torch._check_value(embed % num_heads == 0, lambda: f"{op}: q[0]'s embed_dim ({embed}) must be divisible by "
                                                       f"num_heads ({num_heads})")
    torch._check_value(value_embed % num_heads == 0, lambda: f"{op}: v[0]'s value_embed_dim ({value_embed}) must be "
                                                             f"divisible by num_heads ({num_heads})")
    wanted = [(f"q[{i}]", x, (batch, query_len, embed)) for i, x in enumerate(q)]
    wanted += [(f"k[{i}]", x, (batch, key_len, embed)) for i, x in enumerate(k)]
    wanted += [(f"v[{j}]", x, (batch, key_len, value_embed)) for j, x in enumerate(v)]
    for name, t, shape in wanted:
        torch._check_value(tuple(t.shape) == shape, lambda: f"{op}: {name} must have shape {list(shape)}, "
                                                            f"got {list(t.shape)}")
        check_same_device(op, "q[0]", q0, **{name: t})
    if key_lengths is not None:
        check_same_device(op, "q[0]", q0, key_lengths=key_lengths)
        torch._check_value(tuple(key_lengths.shape) == (batch,),
                           lambda: f"{op}: key_lengths must have shape (batch,) = ({batch},), "
                                   f"got {list(key_lengths.shape)}")
    sets = len(q) if layer_specific else len(v)
    heads = len(q) * num_heads if layer_specific else num_heads
    return batch, query_len, key_len, sets * value_embed, heads


def _multilayer_fake(q, k, v, key_lengths, num_heads, scale, layer_specific, return_probs=False):
    batch, query_len, key_len, width, heads = _fake_sizes("mma_nmt.multilayer_attention", q, k, v, key_lengths,
                                                          num_heads, layer_specific)
    q0 = q[0]
    out = q0.new_empty((batch, query_len, width))
    lse = q0.new_empty((batch, heads, query_len), dtype=statistics_dtype(q0))
    probs = q0.new_empty((batch, heads, query_len, key_len)) if return_probs else q0.new_empty((0,))
    return out, lse, probs


def _multilayer_backward_fake(grad_out, q, k, v, out, lse, probs, key_lengths, num_heads, scale, layer_specific):
    op = "mma_nmt.multilayer_attention_backward"
    batch, query_len, key_len, width, heads = _fake_sizes(op, q, k, v, key_lengths, num_heads, layer_specific)
    extras = [("grad_out", grad_out, (batch, query_len, width)), ("out", out, (batch, query_len, width)),
              ("lse", lse, (batch, heads, query_len))]
    if probs is not None:
        extras.append(("probs", probs, (batch, heads, query_len, key_len)))
    for name, t, shape in extras:
        check_same_device(op, "q[0]", q[0], **{name: t})
        torch._check_value(tuple(t.shape) == shape, lambda: f"{op}: {name} must have shape {list(shape)}, "
                                                            f"got {list(t.shape)}")
    return [contiguous_like(x) for x in q], [contiguous_like(x) for x in k], [contiguous_like(x) for x in v]


def _setup_context(ctx, inputs, output):
    q, k, v, key_lengths, num_heads, scale, layer_specific, _ = inputs
    out, lse, probs = output
    ctx.counts = (len(q), len(k))
    # The weights, when the forward wrote them (return_probs), spare the CPU backward recomputing them.
    ctx.save_for_backward(*q, *k, *v, out, lse, probs if probs.numel() else None, key_lengths)
    ctx.options = (num_heads, scale, layer_specific)
    ctx.mark_non_differentiable(lse, probs)


def _backward(ctx, grad_out, _grad_lse, _grad_probs):
    n_q, n_k = ctx.counts
    *projections, out, lse, probs, key_lengths = ctx.saved_tensors
    q, k, v = projections[:n_q], projections[n_q:n_q + n_k], projections[n_q + n_k:]
    grad_q, grad_k, grad_v = _BACKWARD_OP(grad_out.contiguous(), q, k, v, out, lse, probs, key_lengths,
                                          *ctx.options)
    # One gradient per input the operator was called with: the dispatcher drops a trailing argument equal to its
    # default (return_probs=False), and for operators with Tensor[] inputs torch 2.13 rejects a None for it.
    return (grad_q, grad_k, grad_v) + (None,) * (len(ctx.needs_input_grad) - 3)


_OPERATOR = register_operator("multilayer_attention", fake=_multilayer_fake, backward_fake=_multilayer_backward_fake,
                              setup_context=_setup_context, backward=_backward,
                              native_eager="multilayer_attention_with_autograd")
