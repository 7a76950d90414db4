"""``mma_nmt::attention``: fused scaled-dot-product attention with per-head mask kinds (SPEC section 1).

The kernels live in ``csrc/attention/``; this file adds the functional API, the fake (meta) kernel for tracing and
``torch.compile``, and autograd, whose backward is the ``mma_nmt::attention_backward`` operator.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import torch

from mma_nmt.ops.argument_checks import check_int64
from mma_nmt.ops.argument_defaults import default_scale, draw_dropout_seed
from mma_nmt.ops.device_checks import check_same_device
from mma_nmt.ops.fake_layout import position_major, projection_gradient_like, statistics_dtype
from mma_nmt.ops.head_spec import parse_head_spec
from mma_nmt.ops.padding import operator_key_lengths
from mma_nmt.ops.registration import backward_operator, register_operator

_BACKWARD_OP = backward_operator("attention")


class AttentionResult(NamedTuple):
    out: torch.Tensor  # (B, H, T, Dv)
    lse: torch.Tensor  # (B, H, T) log-sum-exp of each query's visible logits; -inf for a fully masked query
    probs: torch.Tensor | None  # (B, H, T, S) attention weights before dropout, only when asked for


def fused_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    head_kinds: str | Sequence[int] = "G",
    key_lengths: torch.Tensor | None = None,
    key_padding_mask: torch.Tensor | None = None,
    window: int = 1,
    scale: float | None = None,
    query_offset: int = 0,
    dropout_p: float = 0.0,
    seed: int | None = None,
    return_probs: bool = False,
    self_attention: bool = False,
) -> AttentionResult:
    """Attention of ``q`` (B, H, T, D) over ``k`` (B, H, S, D) and ``v`` (B, H, S, Dv), each head with its own mask kind.

    On every device, head views of (B, L, H * D) projections are read in place (only the last dimension must be
    contiguous), ``out`` is stored position-major, (B, T, H, Dv) in memory, so that merging its heads is a view, and
    each input's gradient is laid out like the input (docs/cuda.md, "Layouts").

    ``self_attention=True`` says that the queries are the keys' own positions (T = S, no ``query_offset``; checked):
    query rows at a sentence's padding positions (``i >= J_b``) are then padding, which the models never read, and
    CUDA's FlashAttention path may return 0 there with a zero gradient (SPEC, shared rules), which lets it take
    padded heads of every kind. Every other path, and the CPU, computes those rows. Without the flag every query row
    is a real one, also in a cross-attention whose lengths are equal by chance.

    Args:
        head_kinds: one kind per head as letters (``"GLFB"``; stretched to H heads the paper's way) or HeadKind values.
        key_lengths: (B,) int64 real key count per sentence; or ``key_padding_mask`` (B, S) bool, True at padding.
        window: half-width ``w`` of local heads (key j visible iff |i - j| <= w).
        scale: logit scale, ``1/sqrt(D)`` by default.
        query_offset: key position of query row 0 (``S - T`` for incremental decoding with cached keys).
        dropout_p: attention dropout probability; the mask is redrawn from ``seed`` in backward, never stored.
        seed: dropout seed; drawn from torch's default generator when None and dropout is on.
        return_probs: also return the (B, H, T, S) weights (for analysis; not differentiable).
        self_attention: the queries are the keys' own positions (see above); the modules pass it for self-attention.
    """
    # With q of the wrong rank the operator itself raises the error that names q; give it placeholders until then.
    kinds = parse_head_spec(head_kinds, q.shape[1]) if q.dim() == 4 else []
    check_int64("mma_nmt.attention", window=window, query_offset=query_offset, seed=seed)
    lengths = operator_key_lengths("mma_nmt.attention", q, k, key_lengths, key_padding_mask)
    if scale is None:
        scale = default_scale(q.shape[-1] if q.dim() > 0 else 0)
    if seed is None:
        seed = draw_dropout_seed(dropout_p)
    out, lse, probs = _OPERATOR(q, k, v, lengths, kinds, window, float(scale), query_offset, float(dropout_p), seed,
                                return_probs, bool(self_attention))
    return AttentionResult(out, lse, probs if return_probs else None)


def _check_fake_layout(op, q, k, v, key_lengths, head_kinds, **more):
    """The shape checks of csrc/attention/attention_checks.cpp for fake (meta) tensors, with the same messages; ``more``
    maps further tensors (backward's grad_out, out, lse) to the shape they must have, as a function of q, k, v."""
    layouts = {"q": "(batch, heads, query_len, head_dim)", "k": "(batch, heads, key_len, head_dim)",
               "v": "(batch, heads, key_len, value_dim)"}
    for name, t in (("q", q), ("k", k), ("v", v)):
        layout = layouts[name]
        torch._check_value(t.dim() == 4, lambda: f"{op}: {name} must have shape {layout}, got a {t.dim()}-d tensor")
    batch, heads, _, head_dim = q.shape
    key_len, value_dim = k.shape[2], v.shape[3]
    wanted = {"k": (k, (batch, heads, key_len, head_dim)), "v": (v, (batch, heads, key_len, value_dim))}
    wanted.update({name: (t, shape(q, k, v)) for name, (t, shape) in more.items()})
    for name, (t, shape) in wanted.items():
        message = lambda: f"{op}: {name} must have shape {list(shape)}, got {list(t.shape)}"  # noqa: E731
        torch._check_value(t.dim() == len(shape), message)
        for got, want in zip(t.shape, shape):
            torch._check_value(got == want, message)
    torch._check_value(len(head_kinds) == heads,
                       lambda: f"{op}: head_kinds must give one kind per head ({heads}), got {len(head_kinds)}")
    if key_lengths is not None:
        shape = list(key_lengths.shape)
        message = lambda: f"{op}: key_lengths must have shape (batch,) = ({batch},), got {shape}"  # noqa: E731
        torch._check_value(key_lengths.dim() == 1, message)
        torch._check_value(key_lengths.shape[0] == batch, message)


def _attention_fake(q, k, v, key_lengths, head_kinds, window, scale, query_offset=0, dropout_p=0.0, seed=0,
                    return_probs=False, self_attention=False):
    check_same_device("mma_nmt.attention", "q", q, k=k, v=v, key_lengths=key_lengths)
    _check_fake_layout("mma_nmt.attention", q, k, v, key_lengths, head_kinds)
    _check_self_attention("mma_nmt.attention", q, k, query_offset, self_attention)
    batch, heads, query_len, _ = q.shape
    key_len, value_dim = k.shape[2], v.shape[3]
    out = position_major(q, value_dim)
    lse = q.new_empty((batch, heads, query_len), dtype=statistics_dtype(q))
    probs = q.new_empty((batch, heads, query_len, key_len)) if return_probs else q.new_empty((0,))
    return out, lse, probs


def _attention_backward_fake(grad_out, q, k, v, out, lse, key_lengths, head_kinds, window, scale, query_offset,
                             dropout_p, seed, self_attention=False):
    check_same_device("mma_nmt.attention_backward", "q", q, grad_out=grad_out, k=k, v=v, out=out, lse=lse,
                      key_lengths=key_lengths)
    out_shape = lambda q, k, v: (q.shape[0], q.shape[1], q.shape[2], v.shape[3])  # noqa: E731
    _check_fake_layout("mma_nmt.attention_backward", q, k, v, key_lengths, head_kinds, grad_out=(grad_out, out_shape),
                       out=(out, out_shape), lse=(lse, lambda q, k, v: tuple(q.shape[:3])))
    _check_self_attention("mma_nmt.attention_backward", q, k, query_offset, self_attention)
    return projection_gradient_like(q), projection_gradient_like(k), projection_gradient_like(v)


def _check_self_attention(op, q, k, query_offset, self_attention):
    """attention_checks.cpp's check of the self_attention flag, with its message."""
    if not self_attention:
        return
    torch._check_value(q.shape[2] == k.shape[2] and query_offset == 0, lambda: (
        f"{op}: self_attention=True says the queries are the keys' own positions, which needs query_len == key_len "
        f"and query_offset == 0; got query_len {q.shape[2]}, key_len {k.shape[2]}, query_offset {query_offset}"))


def _setup_context(ctx, inputs, output):
    q, k, v, key_lengths, head_kinds, window, scale, query_offset, dropout_p, seed, _, self_attention = inputs
    out, lse, probs = output
    ctx.save_for_backward(q, k, v, out, lse, key_lengths)
    ctx.options = (head_kinds, window, scale, query_offset, dropout_p, seed, self_attention)
    ctx.mark_non_differentiable(lse, probs)


def _backward(ctx, grad_out, _grad_lse, _grad_probs):
    q, k, v, out, lse, key_lengths = ctx.saved_tensors
    grad_q, grad_k, grad_v = _BACKWARD_OP(grad_out, q, k, v, out, lse, key_lengths, *ctx.options)
    return grad_q, grad_k, grad_v, None, None, None, None, None, None, None, None, None


_OPERATOR = register_operator("attention", fake=_attention_fake, backward_fake=_attention_backward_fake,
                              setup_context=_setup_context, backward=_backward,
                              native_eager="attention_with_autograd")
