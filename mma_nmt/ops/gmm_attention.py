"""``mma_nmt::gmm_attention``: Gaussian-mixture concentrated cross-attention (SPEC section 5), fused.

Per head and query row ``i`` the operator computes, in one pass over the sentence's ``J`` real keys,

    alpha_ij = softmax_j(scale * q_i . k_j + b_ij)                 (b = localness-Gaussian bias, 0 unless given)
    beta_ij  = sum_k omega_ik / Z_ik * exp(-(j - mu_ik)^2 / (2 sigma_ik^2))      for j < J, 0 on padding
    out_i    = (1 - g_i) * sum_j alpha_ij v_j + g_i * sum_j beta_ij v_j

with ``sigma`` floored at ``sigma_floor``, and ``Z`` (and whether ``beta`` is divided by its sum over the sentence) as
``normalization`` says: ``"approximate"``, ``"strict"`` or ``"unnormalised"``, each defined in
:mod:`mma_nmt.ops.gmm_normalization`. No (T, S) tensor is built unless the weights are asked for. The mixture is
evaluated exactly at every real key (no truncation to a few sigma around each mean). In strict mode the kernels divide
out the row's largest term before summing (csrc/gmm/gmm_math.h), so the normalised weights stay finite and sum to 1
even when every term underflows. The kernels live in ``csrc/gmm/``; this file adds the functional API, the fake kernels
and autograd (registered through :mod:`mma_nmt.ops.registration`), whose backward is
``mma_nmt::gmm_attention_backward``. The saved statistics and contexts (lse, log_mass, alpha v, beta v) are outputs for
the backward op and for analysis; they are not differentiable.

The localness-Gaussian variant (Yang et al. 2018) adds ``b_ij = -(j - local_center_i)^2 / (2 local_width_i^2)`` to the
logits; it is a pair of optional inputs of this same operator rather than a mixture, because a bias inside the softmax is
not a mixture of the output.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from mma_nmt.ops.argument_defaults import default_scale
from mma_nmt.ops.device_checks import check_same_device
from mma_nmt.ops.fake_layout import contiguous_like, position_major, projection_gradient_like, statistics_dtype
from mma_nmt.ops.gmm_normalization import GmmNormalization, normalization_code
from mma_nmt.ops.padding import operator_key_lengths
from mma_nmt.ops.registration import backward_operator, register_operator

_BACKWARD_OP = backward_operator("gmm_attention")

DEFAULT_SIGMA_FLOOR = 1e-2  # in key positions; keeps 1/sigma finite (SPEC: "floored at a small positive value")


class GmmAttentionResult(NamedTuple):
    out: torch.Tensor  # (B, H, T, Dv)
    lse: torch.Tensor  # (B, H, T) log-sum-exp of the logits; -inf for a sentence without keys
    log_mass: torch.Tensor  # (B, H, T) log sum_{j<J} of the mixture before strict renormalisation
    alpha: torch.Tensor | None  # (B, H, T, S) dot-product weights, only when asked for
    beta: torch.Tensor | None  # (B, H, T, S) mixture weights, only when asked for
    gamma: torch.Tensor | None  # (B, H, T, S) (1 - g) alpha + g beta, only when asked for


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
    normalization: GmmNormalization = "approximate",
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
        normalization: ``"approximate"``, ``"strict"`` or ``"unnormalised"`` (:mod:`mma_nmt.ops.gmm_normalization`).
        sigma_floor: lower bound of ``sigma`` and ``local_width`` (gradient 0 below it, like ``clamp_min``).
        scale: logit scale, ``1/sqrt(D)`` by default.
        return_weights: also return the (B, H, T, S) weights alpha, beta and gamma (analysis only; not differentiable).

    The mixture's tensors (omega, mu, sigma, gate, local_center, local_width) share one dtype: q's, or float32 beside
    float16/bfloat16 q, k and v on CUDA (what CUDA autocast hands over; their gradients are float32 then).
    """
    lengths = operator_key_lengths("mma_nmt.gmm_attention", q, k, key_lengths, key_padding_mask)
    if scale is None:
        scale = default_scale(q.shape[-1] if q.dim() == 4 else 0)
    out, lse, log_mass, _, _, alpha, beta = _OPERATOR(
        q, k, v, lengths, omega, mu, sigma, gate, local_center, local_width, float(scale),
        normalization_code(normalization), float(sigma_floor), return_weights)
    if not return_weights:
        return GmmAttentionResult(out, lse, log_mass, None, None, None)
    g = gate.detach().unsqueeze(-1)  # (B, H, T, 1)
    return GmmAttentionResult(out, lse, log_mass, alpha, beta, (1 - g) * alpha + g * beta)


def _gmm_attention_fake(q, k, v, key_lengths, omega, mu, sigma, gate, local_center, local_width, scale, normalization,
                        sigma_floor, return_weights=False):
    check_same_device("mma_nmt.gmm_attention", "q", q, k=k, v=v, key_lengths=key_lengths, omega=omega, mu=mu,
                      sigma=sigma, gate=gate, local_center=local_center, local_width=local_width)
    torch._check(q.dim() == 4 and k.dim() == 4 and v.dim() == 4, lambda: "q, k, v must be 4-d (batch, heads, len, dim)")
    batch, heads, query_len, _ = q.shape
    key_len, value_dim = k.shape[2], v.shape[3]
    stats = statistics_dtype(q)
    out = position_major(q, value_dim)  # (B, T, H, Dv) in memory: merging the heads is a view
    lse = q.new_empty((batch, heads, query_len), dtype=stats)
    log_mass = q.new_empty((batch, heads, query_len), dtype=stats)
    alpha_context = q.new_empty((batch, heads, query_len, value_dim), dtype=stats)
    beta_context = q.new_empty((batch, heads, query_len, value_dim), dtype=stats)
    weights_shape = (batch, heads, query_len, key_len) if return_weights else (0,)
    return out, lse, log_mass, alpha_context, beta_context, q.new_empty(weights_shape), q.new_empty(weights_shape)


def _gmm_attention_backward_fake(grad_out, q, k, v, key_lengths, omega, mu, sigma, gate, local_center, local_width,
                                 lse, log_mass, alpha_context, beta_context, scale, normalization, sigma_floor):
    check_same_device("mma_nmt.gmm_attention_backward", "q", q, grad_out=grad_out, k=k, v=v, key_lengths=key_lengths,
                      omega=omega, mu=mu, sigma=sigma, gate=gate, local_center=local_center, local_width=local_width,
                      lse=lse, log_mass=log_mass, alpha_context=alpha_context, beta_context=beta_context)
    local_shape = gate.shape if local_center is not None else (0,)
    # q, k and v's gradients laid out like them (a head view of a projection gets a position-major gradient)
    return (projection_gradient_like(q), projection_gradient_like(k), projection_gradient_like(v),
            contiguous_like(omega), contiguous_like(mu), contiguous_like(sigma), contiguous_like(gate),
            gate.new_empty(local_shape), gate.new_empty(local_shape))


def _setup_context(ctx, inputs, output):
    (q, k, v, key_lengths, omega, mu, sigma, gate, local_center, local_width, scale, normalization, sigma_floor,
     _return_weights) = inputs
    _, lse, log_mass, alpha_context, beta_context, alpha, beta = output
    ctx.save_for_backward(q, k, v, key_lengths, omega, mu, sigma, gate, local_center, local_width, lse, log_mass,
                          alpha_context, beta_context)
    ctx.options = (scale, normalization, sigma_floor)
    ctx.mark_non_differentiable(lse, log_mass, alpha_context, beta_context, alpha, beta)


def _backward(ctx, grad_out, *_unused_grads):
    saved = ctx.saved_tensors
    grads = _BACKWARD_OP(grad_out, *saved, *ctx.options)  # the kernels read it through its strides
    grad_q, grad_k, grad_v, grad_omega, grad_mu, grad_sigma, grad_gate, grad_center, grad_width = grads
    has_local = saved[8] is not None
    return (grad_q, grad_k, grad_v, None, grad_omega, grad_mu, grad_sigma, grad_gate,
            grad_center if has_local else None, grad_width if has_local else None, None, None, None, None)


# The mixture's inputs, which the CUDA kernels read (and whose gradients they write) in float32 beside float16/bfloat16
# q, k and v: CUDA autocast leaves them in float32 (csrc/gmm/cuda/mixture_values.cuh).
MIXTURE_ARGUMENTS = ("omega", "mu", "sigma", "gate", "local_center", "local_width")

_OPERATOR = register_operator("gmm_attention", fake=_gmm_attention_fake, backward_fake=_gmm_attention_backward_fake,
                              setup_context=_setup_context, backward=_backward,
                              native_eager="gmm_attention_with_autograd", float32_beside_half=MIXTURE_ARGUMENTS)
