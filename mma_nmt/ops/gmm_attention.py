"""``mma_nmt::gmm_attention``: Gaussian-mixture concentrated cross-attention (SPEC section 5), fused.

Per head and query row ``i`` the operator computes, in one pass over the sentence's ``J`` real keys,

    alpha_ij = softmax_j(scale * q_i . k_j + b_ij)                 (b = localness-Gaussian bias, 0 unless given)
    beta_ij  = sum_k omega_ik / Z_ik * exp(-(j - mu_ik)^2 / (2 sigma_ik^2))      for j < J, 0 on padding
    out_i    = (1 - g_i) * sum_j alpha_ij v_j + g_i * sum_j beta_ij v_j

with ``sigma`` floored at ``sigma_floor`` and, by ``normalization``: ``"approximate"`` (``Z = sqrt(2 pi) sigma``; the
paper's sigma limits are applied when converting network outputs, see :mod:`mma_nmt.ops.gmm_conversion`), ``"strict"``
(the same ``Z``, then ``beta`` divided by its sum over the sentence) or ``"unnormalised"`` (``Z = 1``, synthesis network).
No (T, S) tensor is built unless the weights are asked for. The mixture is evaluated exactly at every real key (no
truncation to a few sigma around each mean). In strict mode the kernels divide out the row's largest term before
summing (csrc/gmm/gmm_math.h), so the normalised weights stay finite and sum to 1 even when every term underflows.
The kernels live in ``csrc/gmm/``; this file adds the functional API, the fake kernels and autograd, whose backward is
``mma_nmt::gmm_attention_backward``. The saved statistics and contexts (lse, log_mass, alpha v, beta v) are outputs
for the backward op and for analysis; they are not differentiable.

The localness-Gaussian variant (Yang et al. 2018) adds ``b_ij = -(j - local_center_i)^2 / (2 local_width_i^2)`` to the
logits; it is a pair of optional inputs of this same operator rather than a mixture, because a bias inside the softmax is
not a mixture of the output.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from mma_nmt._extension import require_device_support
from mma_nmt.ops.device_checks import check_same_device
from mma_nmt.ops.fake_layout import contiguous_like
from mma_nmt.ops.first_order import first_order_only, refuse_forward_ad
from mma_nmt.ops.padding import check_padding_mask_shape, resolve_key_lengths

_OP = torch.ops.mma_nmt.gmm_attention
_BACKWARD_OP = torch.ops.mma_nmt.gmm_attention_backward

NORMALIZATIONS = {"approximate": 0, "strict": 1, "unnormalised": 2}  # values of csrc/gmm/gmm_math.h
DEFAULT_SIGMA_FLOOR = 1e-2  # in key positions; keeps 1/sigma finite (SPEC: "floored at a small positive value")


class GmmAttentionResult(NamedTuple):
    out: torch.Tensor  # (B, H, T, Dv)
    lse: torch.Tensor  # (B, H, T) log-sum-exp of the logits; -inf for a sentence without keys
    log_mass: torch.Tensor  # (B, H, T) log sum_{j<J} of the mixture before strict renormalisation
    alpha: torch.Tensor | None  # (B, H, T, S) dot-product weights, only when asked for
    beta: torch.Tensor | None  # (B, H, T, S) mixture weights, only when asked for
    gamma: torch.Tensor | None  # (B, H, T, S) (1 - g) alpha + g beta, only when asked for


def normalization_code(normalization: str | int) -> int:
    """The schema's integer for ``"approximate"``, ``"strict"`` or ``"unnormalised"``."""
    if isinstance(normalization, int):
        return normalization
    if normalization not in NORMALIZATIONS:
        raise ValueError(f"normalization must be one of {sorted(NORMALIZATIONS)}, got {normalization!r}")
    return NORMALIZATIONS[normalization]


def gmm_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    omega: torch.Tensor,
    mu: torch.Tensor,
    sigma: torch.Tensor,
    gate: torch.Tensor,
    key_lengths: torch.Tensor | None = None,
    key_padding_mask: torch.Tensor | None = None,
    local_center: torch.Tensor | None = None,
    local_width: torch.Tensor | None = None,
    normalization: str = "approximate",
    sigma_floor: float = DEFAULT_SIGMA_FLOOR,
    scale: float | None = None,
    return_weights: bool = False,
) -> GmmAttentionResult:
    """GMM cross-attention of ``q`` (B, H, T, D) over ``k`` (B, H, S, D) and ``v`` (B, H, S, Dv).

    Args:
        omega, mu, sigma: (B, H, T, K) mixture weights, means (in key positions, 0-based) and standard deviations,
            already converted from network outputs (:mod:`mma_nmt.ops.gmm_conversion`). Differentiable.
        gate: (B, H, T) weight ``g`` of the mixture in the output. Differentiable.
        key_lengths: (B,) int64 real key count ``J`` per sentence; or ``key_padding_mask`` (B, S) bool, True at padding.
        local_center, local_width: (B, H, T) each, the localness-Gaussian logit bias; both or neither. Differentiable.
        normalization: ``"approximate"``, ``"strict"`` or ``"unnormalised"`` (see the module docstring).
        sigma_floor: lower bound of ``sigma`` and ``local_width`` (gradient 0 below it, like ``clamp_min``).
        scale: logit scale, ``1/sqrt(D)`` by default.
        return_weights: also return the (B, H, T, S) weights alpha, beta and gamma (analysis only; not differentiable).
    """
    require_device_support(q, "mma_nmt.gmm_attention")
    refuse_forward_ad("mma_nmt.gmm_attention", (q, k, v, omega, mu, sigma, gate, local_center, local_width))
    _check_same_device(q, k=k, v=v, omega=omega, mu=mu, sigma=sigma, gate=gate, local_center=local_center,
                       local_width=local_width)
    if q.dim() == 4 and k.dim() == 4:  # otherwise the operator names q or k
        check_padding_mask_shape("mma_nmt.gmm_attention", key_padding_mask, q.shape[0], k.shape[2])
    lengths = resolve_key_lengths(key_lengths, key_padding_mask, q.device, op="mma_nmt.gmm_attention")
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1]) if q.dim() == 4 and q.shape[-1] > 0 else 1.0
    out, lse, log_mass, _, _, alpha, beta = _call_op(
        q, k, v, lengths, omega, mu, sigma, gate, local_center, local_width, float(scale),
        normalization_code(normalization), float(sigma_floor), return_weights)
    if not return_weights:
        return GmmAttentionResult(out, lse, log_mass, None, None, None)
    g = gate.detach().unsqueeze(-1)  # (B, H, T, 1)
    return GmmAttentionResult(out, lse, log_mass, alpha, beta, (1 - g) * alpha + g * beta)


def _call_op(*args):
    """``mma_nmt::gmm_attention`` on the schema's arguments, with its registered autograd formula.

    In eager mode the formula is applied through :class:`_EagerGmmAttention` rather than through the op's autograd
    kernel: torch.library's generic wrapper (``register_autograd``) costs per call a Python round trip through the
    dispatcher and a re-read of the op's schema (``fill_defaults``), about 60 us of CPU time per forward (thread time,
    B=1 T=1), which is a few percent of the whole fused forward+backward at T = S = 16. Under ``torch.compile`` and
    ``torch.func`` transforms the op itself is called, so they see the registered autograd as before."""
    if torch.compiler.is_compiling() or torch._C._are_functorch_transforms_active():
        return _OP(*args)
    if torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in args):
        return _EagerGmmAttention.apply(*args)
    with torch._C._AutoDispatchBelowAutograd():  # no gradient wanted: straight to the device kernel
        return _OP(*args)


def _check_same_device(q: torch.Tensor, **tensors: torch.Tensor | None) -> None:
    for name, tensor in tensors.items():
        if tensor is not None and tensor.device != q.device:
            raise ValueError(f"mma_nmt.gmm_attention: {name} is on {tensor.device} but q is on {q.device}")


@torch.library.register_fake("mma_nmt::gmm_attention")
def _gmm_attention_fake(q, k, v, key_lengths, omega, mu, sigma, gate, local_center, local_width, scale, normalization,
                        sigma_floor, return_weights=False):
    check_same_device("mma_nmt.gmm_attention", "q", q, k=k, v=v, key_lengths=key_lengths, omega=omega, mu=mu,
                      sigma=sigma, gate=gate, local_center=local_center, local_width=local_width)
    torch._check(q.dim() == 4 and k.dim() == 4 and v.dim() == 4, lambda: "q, k, v must be 4-d (batch, heads, len, dim)")
    batch, heads, query_len, _ = q.shape
    key_len, value_dim = k.shape[2], v.shape[3]
    stats = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    out = q.new_empty((batch, heads, query_len, value_dim))
    lse = q.new_empty((batch, heads, query_len), dtype=stats)
    log_mass = q.new_empty((batch, heads, query_len), dtype=stats)
    alpha_context = q.new_empty((batch, heads, query_len, value_dim), dtype=stats)
    beta_context = q.new_empty((batch, heads, query_len, value_dim), dtype=stats)
    weights_shape = (batch, heads, query_len, key_len) if return_weights else (0,)
    return out, lse, log_mass, alpha_context, beta_context, q.new_empty(weights_shape), q.new_empty(weights_shape)


@torch.library.register_fake("mma_nmt::gmm_attention_backward")
def _gmm_attention_backward_fake(grad_out, q, k, v, key_lengths, omega, mu, sigma, gate, local_center, local_width,
                                 lse, log_mass, alpha_context, beta_context, scale, normalization, sigma_floor):
    check_same_device("mma_nmt.gmm_attention_backward", "q", q, grad_out=grad_out, k=k, v=v, key_lengths=key_lengths,
                      omega=omega, mu=mu, sigma=sigma, gate=gate, local_center=local_center, local_width=local_width,
                      lse=lse, log_mass=log_mass, alpha_context=alpha_context, beta_context=beta_context)
    local_shape = gate.shape if local_center is not None else (0,)
    return (contiguous_like(q), contiguous_like(k), contiguous_like(v), contiguous_like(omega), contiguous_like(mu),
            contiguous_like(sigma), contiguous_like(gate), gate.new_empty(local_shape), gate.new_empty(local_shape))


def _setup_context(ctx, inputs, output):
    (q, k, v, key_lengths, omega, mu, sigma, gate, local_center, local_width, scale, normalization, sigma_floor,
     _return_weights) = inputs
    _, lse, log_mass, alpha_context, beta_context, alpha, beta = output
    ctx.save_for_backward(q, k, v, key_lengths, omega, mu, sigma, gate, local_center, local_width, lse, log_mass,
                          alpha_context, beta_context)
    ctx.options = (scale, normalization, sigma_floor)
    ctx.mark_non_differentiable(lse, log_mass, alpha_context, beta_context, alpha, beta)


@first_order_only("mma_nmt.gmm_attention")
def _backward(ctx, grad_out, *_unused_grads):
    saved = ctx.saved_tensors
    grads = _BACKWARD_OP(grad_out.contiguous(), *saved, *ctx.options)
    grad_q, grad_k, grad_v, grad_omega, grad_mu, grad_sigma, grad_gate, grad_center, grad_width = grads
    has_local = saved[8] is not None
    return (grad_q, grad_k, grad_v, None, grad_omega, grad_mu, grad_sigma, grad_gate,
            grad_center if has_local else None, grad_width if has_local else None, None, None, None, None)


torch.library.register_autograd("mma_nmt::gmm_attention", _backward, setup_context=_setup_context)


class _EagerGmmAttention(torch.autograd.Function):
    """The op's registered autograd formula (``_setup_context`` and ``_backward`` above) as an autograd.Function, for
    eager calls (see ``_call_op``): the same saved tensors and the same backward op."""

    @staticmethod
    def forward(ctx, *inputs):
        with torch._C._AutoDispatchBelowAutograd():
            output = _OP(*inputs)
        _setup_context(ctx, inputs, output)
        return output

    @staticmethod
    def backward(ctx, *grads):
        return _backward(ctx, *grads)
