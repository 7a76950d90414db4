"""``mma_nmt::shared_value_attention``: attention with per-head keys and one value set shared by every head — the step
of multi-head Luong attention (SPEC section 2), where head ``i``'s keys are ``W_sc_i hs`` and the values are the
unprojected encoder states ``hs``. The kernels (``csrc/luong/``) read the shared values in place: the general
``mma_nmt::attention`` would need them expanded to ``(B, H, S, Dv)`` and copies such an expanded tensor.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from mma_nmt.ops.device_checks import check_same_device
from mma_nmt.ops.fake_layout import contiguous_like, statistics_dtype
from mma_nmt.ops.padding import operator_key_lengths
from mma_nmt.ops.registration import backward_operator, register_operator

_BACKWARD_OP = backward_operator("shared_value_attention")


class SharedValueResult(NamedTuple):
    out: torch.Tensor  # (B, H, T, Dv) context vector of each head
    lse: torch.Tensor  # (B, H, T) log-sum-exp of the logits; -inf for a sentence without keys
    probs: torch.Tensor | None  # (B, H, T, S) attention weights, only when asked for (not differentiable)


def shared_value_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    key_lengths: torch.Tensor | None = None,
    key_padding_mask: torch.Tensor | None = None,
    scale: float = 1.0,
    return_probs: bool = False,
) -> SharedValueResult:
    """``out[b, h, t] = sum_s softmax_s(scale * q[b, h, t] . k[b, h, s]) v[b, s]`` over the real keys of sentence b.

    Args:
        q: (B, H, T, D) queries; T = 1 for one decoder step.
        k: (B, H, S, D) per-head keys.
        v: (B, S, Dv) values shared by all heads.
        key_lengths: (B,) int real source length per sentence; or ``key_padding_mask`` (B, S) bool, True at padding.
        scale: logit scale; Luong's "general" score is unscaled (1.0, the default).
        return_probs: also return the (B, H, T, S) weights.
    """
    lengths = operator_key_lengths("mma_nmt.shared_value_attention", q, k, key_lengths, key_padding_mask)
    out, lse, probs = _OPERATOR(q, k, v, lengths, float(scale), return_probs)
    return SharedValueResult(out, lse, probs if return_probs else None)


def _shared_value_fake(q, k, v, key_lengths, scale, return_probs=False):
    check_same_device("mma_nmt.shared_value_attention", "q", q, k=k, v=v, key_lengths=key_lengths)
    torch._check(q.dim() == 4 and k.dim() == 4 and v.dim() == 3,
                 lambda: "q, k must be (batch, heads, len, dim) and v (batch, key_len, value_dim)")
    batch, heads, query_len, _ = q.shape
    out = q.new_empty((batch, heads, query_len, v.shape[2]))
    lse = q.new_empty((batch, heads, query_len), dtype=statistics_dtype(q))
    probs = q.new_empty((batch, heads, query_len, k.shape[2])) if return_probs else q.new_empty((0,))
    return out, lse, probs


def _shared_value_backward_fake(grad_out, q, k, v, out, lse, key_lengths, scale):
    check_same_device("mma_nmt.shared_value_attention_backward", "q", q, grad_out=grad_out, k=k, v=v, out=out, lse=lse,
                      key_lengths=key_lengths)
    return contiguous_like(q), contiguous_like(k), contiguous_like(v)


def _setup_context(ctx, inputs, output):
    q, k, v, key_lengths, scale, _ = inputs
    out, lse, probs = output
    ctx.save_for_backward(q, k, v, out, lse, key_lengths)
    ctx.scale = scale
    ctx.mark_non_differentiable(lse, probs)


def _backward(ctx, grad_out, _grad_lse, _grad_probs):
    q, k, v, out, lse, key_lengths = ctx.saved_tensors
    grad_q, grad_k, grad_v = _BACKWARD_OP(grad_out.contiguous(), q, k, v, out, lse, key_lengths, ctx.scale)
    return grad_q, grad_k, grad_v, None, None, None


_OPERATOR = register_operator("shared_value_attention", fake=_shared_value_fake,
                              backward_fake=_shared_value_backward_fake, setup_context=_setup_context,
                              backward=_backward, native_eager="shared_value_attention_with_autograd")
