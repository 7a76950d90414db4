"""Plain-PyTorch GMM cross-attention, written straight from SPEC section 5. It builds the (B, H, T, S, K) mixture terms
and (B, H, T, S) weights that the fused operator avoids, and is the ground truth of the tests and the
``implementation="reference"`` path of :class:`mma_nmt.modules.GmmCrossAttention`."""

from __future__ import annotations

import math

import torch

from mma_nmt.ops.gmm_normalization import GmmNormalization, check_normalization


def _real_keys(key_lengths: torch.Tensor | None, batch: int, key_len: int, device) -> torch.Tensor:
    """(B, 1, 1, S) bool: True at the real keys of each sentence."""
    j = torch.arange(key_len, device=device)
    if key_lengths is None:
        return torch.ones(batch, 1, 1, key_len, dtype=torch.bool, device=device)
    return j.view(1, 1, 1, -1) < key_lengths.to(device).view(-1, 1, 1, 1)


def dot_product_weights(q, k, real, *, scale: float, local_center=None, local_width=None,
                        sigma_floor: float = 1e-2) -> torch.Tensor:
    """alpha (B, H, T, S): softmax over the real keys of ``scale * q k^T`` plus the localness-Gaussian bias if given."""
    logits = torch.matmul(q, k.transpose(-1, -2)) * scale  # (B, H, T, S)
    if local_center is not None:
        j = torch.arange(k.shape[2], device=q.device, dtype=q.dtype)  # (S,)
        width = local_width.clamp_min(sigma_floor).unsqueeze(-1)  # (B, H, T, 1)
        logits = logits - (j - local_center.unsqueeze(-1)) ** 2 / (2 * width**2)
    logits = logits.masked_fill(~real, float("-inf"))
    has_key = real.any(dim=-1, keepdim=True)  # (B, 1, 1, 1)
    logits = torch.where(has_key, logits, torch.zeros_like(logits))  # keeps softmax finite without keys
    return torch.softmax(logits, dim=-1) * real


def mixture_weights(omega, mu, sigma, real, *, normalization: GmmNormalization = "approximate",
                    sigma_floor: float = 1e-2) -> torch.Tensor:
    """beta (B, H, T, S) = sum_k omega_k / Z_k exp(-(j - mu_k)^2 / (2 sigma_k^2)) on real keys, 0 on padding;
    divided by its sum over the sentence when ``normalization == "strict"``; ``Z = 1`` when ``"unnormalised"``
    (:mod:`mma_nmt.ops.gmm_normalization`)."""
    check_normalization(normalization)
    key_len = real.shape[-1]
    j = torch.arange(key_len, device=mu.device, dtype=mu.dtype).view(-1, 1)  # (S, 1)
    sigma = sigma.clamp_min(sigma_floor).unsqueeze(-2)  # (B, H, T, 1, K)
    d = j - mu.unsqueeze(-2)  # (B, H, T, S, K)
    z = torch.ones_like(sigma) if normalization == "unnormalised" else math.sqrt(2 * math.pi) * sigma
    exponent = -(d**2) / (2 * sigma**2)  # (B, H, T, S, K)
    if normalization != "strict":
        terms = omega.unsqueeze(-2) / z * torch.exp(exponent)  # (B, H, T, S, K)
        return terms.sum(-1) * real  # (B, H, T, S)
    if key_len == 0:
        return torch.zeros(real.shape[0], *mu.shape[1:3], 0, dtype=mu.dtype, device=mu.device)
    # Strict: beta / sum_j beta does not change when every term is divided by the row's largest, so do that first; the
    # ratio is then right even where every term underflows (a narrow component between two keys), as SPEC's formula is.
    weight = omega.unsqueeze(-2) / z  # (B, H, T, 1, K)
    positive = (weight > 0) | weight.isnan()  # a NaN weight (omega or sigma) must make the row NaN, not vanish
    log_terms = torch.log(torch.where(positive, weight, torch.ones_like(weight))) + exponent
    log_terms = log_terms.masked_fill(~(positive & real.unsqueeze(-1)), float("-inf"))  # (B, H, T, S, K)
    largest = log_terms.detach().amax(dim=(-2, -1), keepdim=True)
    largest = torch.where(torch.isfinite(largest), largest, torch.zeros_like(largest))
    beta = torch.exp(log_terms - largest).sum(-1)  # (B, H, T, S), 0 on padding
    total = beta.sum(-1, keepdim=True)
    return torch.where(total > 0, beta / torch.where(total > 0, total, torch.ones_like(total)), beta)


def gmm_attention_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    omega: torch.Tensor,
    mu: torch.Tensor,
    sigma: torch.Tensor,
    gate: torch.Tensor,
    key_lengths: torch.Tensor | None = None,
    local_center: torch.Tensor | None = None,
    local_width: torch.Tensor | None = None,
    normalization: GmmNormalization = "approximate",
    sigma_floor: float = 1e-2,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Same arguments as :func:`mma_nmt.ops.gmm_attention`. Returns ``(out (B, H, T, Dv), alpha, beta, gamma)``, the
    weights (B, H, T, S) each: gamma = (1 - g) alpha + g beta and out = gamma v."""
    batch, _, _, head_dim = q.shape
    if scale is None:
        scale = 1.0 / math.sqrt(head_dim)
    real = _real_keys(key_lengths, batch, k.shape[2], q.device)  # (B, 1, 1, S)
    alpha = dot_product_weights(q, k, real, scale=scale, local_center=local_center, local_width=local_width,
                                sigma_floor=sigma_floor)
    beta = mixture_weights(omega, mu, sigma, real, normalization=normalization, sigma_floor=sigma_floor)
    g = gate.unsqueeze(-1)  # (B, H, T, 1)
    gamma = (1 - g) * alpha + g * beta  # in the mixture's dtype where it is wider than q's (float32 beside bfloat16)
    return torch.matmul(gamma.to(v.dtype), v), alpha, beta, gamma
