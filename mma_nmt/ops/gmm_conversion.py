"""Conversion of predictor-network outputs into the mixture parameters of GMM cross-attention (SPEC section 5, the
paper's Table 1). Plain PyTorch autograd: every function is O(T*K), elementwise over (B, H, T, K).

Shapes: network outputs ``w_hat``, ``mu_hat``, ``sigma_hat`` are (B, H, T, K); ``source_lengths`` is (B,) (the true
length ``J`` of each source sentence). Returned ``omega``, ``mu``, ``sigma`` are (B, H, T, K), in key positions.

Where the paper's formulas can overflow for extreme network outputs (the synthesis network's ``exp``), the exponent is
clamped at +-``EXP_LIMIT``; this changes nothing for outputs of ordinary size and keeps every value finite.
"""

from __future__ import annotations

import math

import torch

from mma_nmt.ops.running_sum import running_sum

EXP_LIMIT = 30.0


def _lengths(source_lengths: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return source_lengths.to(device=like.device, dtype=like.dtype).view(-1, 1, 1, 1)  # (B, 1, 1, 1)


def _smaller(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``torch.minimum(a, b)`` for tensors of one shape, NaN where either is, whose backward is one ``where`` each way
    where minimum's own is ten elementwise passes (a launch each on a GPU). At a tie the gradient goes to ``a``, where
    minimum splits it: both are subgradients of the minimum."""
    return torch.where((a <= b) | a.isnan(), a, b)


def approximate_mixture(w_hat: torch.Tensor, mu_hat: torch.Tensor, sigma_hat: torch.Tensor, *,
                        source_lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The paper's default: ``omega = softmax_K(w^)``, ``mu = J sigmoid(mu^)``,
    ``sigma = min(J/6 sigmoid(sigma^), mu/3, (J - mu)/3)`` so that [mu - 3 sigma, mu + 3 sigma] lies in [0, J]."""
    length = _lengths(source_lengths, mu_hat)
    omega = torch.softmax(w_hat, dim=-1)
    mu = length * torch.sigmoid(mu_hat)
    # min(mu, J - mu) / 3 is min(mu/3, (J - mu)/3) to the bit: rounding a quotient is monotone
    sigma = _smaller(length / 6 * torch.sigmoid(sigma_hat), _smaller(mu, length - mu) / 3)
    return omega, mu, sigma


def strict_mixture(w_hat: torch.Tensor, mu_hat: torch.Tensor, sigma_hat: torch.Tensor, *,
                   source_lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """'Our Method+Norm.': as :func:`approximate_mixture` but ``sigma = J sigmoid(sigma^)``; the operator then divides
    beta by its sum over the sentence (``normalization="strict"``)."""
    length = _lengths(source_lengths, mu_hat)
    return torch.softmax(w_hat, dim=-1), length * torch.sigmoid(mu_hat), length * torch.sigmoid(sigma_hat)


def synthesis_mixture(w_hat: torch.Tensor, mu_hat: torch.Tensor, sigma_hat: torch.Tensor, *,
                      previous_mu: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Graves' synthesis network: ``omega = exp(w^)``, ``mu_i = mu_{i-1} + exp(mu^_i)`` along the target steps (dim 2),
    ``sigma = sqrt(exp(-sigma^) / 2)``; used with ``normalization="unnormalised"`` (Z = 1, see
    :mod:`mma_nmt.ops.gmm_normalization`).

    ``previous_mu`` (B, H, 1, K) is the mean of the step before the first one given (incremental decoding); 0 if None.
    The running sum over the steps is :func:`~mma_nmt.ops.running_sum.running_sum`: ``cumsum``, or under torch's
    deterministic algorithms (``train.deterministic``) additions by doubling, which CUDA runs in a fixed order.
    """
    omega = torch.exp(w_hat.clamp(max=EXP_LIMIT))
    mu = running_sum(torch.exp(mu_hat.clamp(max=EXP_LIMIT)), dim=2)  # (B, H, T, K), monotone along T
    if previous_mu is not None:
        mu = mu + previous_mu
    sigma = torch.exp(-0.5 * sigma_hat.clamp(min=-EXP_LIMIT)) / math.sqrt(2.0)
    return omega, mu, sigma


def hard_coded_mixture(query_positions: torch.Tensor, source_lengths: torch.Tensor, heads: int, *,
                       length_ratio: float = 1.0,
                       sigma: float = 1.0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Hard-coded Gaussian (You et al. 2020): one fixed component per query, mean at source position
    ``min(i * length_ratio, J - 1)`` for target position ``i``, fixed ``sigma``; used with strict normalisation and gate 1.

    ``query_positions`` is (T,) int64 target positions (``step + arange(T)`` when decoding incrementally).
    Returns omega, mu, sigma of shape (B, H, T, 1).
    """
    length = source_lengths.to(torch.float32).view(-1, 1, 1, 1)  # (B, 1, 1, 1)
    position = query_positions.to(torch.float32).view(1, 1, -1, 1) * length_ratio  # (1, 1, T, 1)
    mu = torch.minimum(position, (length - 1).clamp(min=0))  # (B, 1, T, 1)
    mu = mu.expand(-1, heads, -1, -1).contiguous()  # (B, H, T, 1)
    return torch.ones_like(mu), mu, torch.full_like(mu, sigma)


def localness_bias(center_hat: torch.Tensor, width_hat: torch.Tensor,
                   source_lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Localness Gaussian (Yang et al. 2018): center ``P = J sigmoid(p^)`` and width ``D / 2`` with ``D = J sigmoid(z^)``
    of the logit bias ``-(j - P)^2 / (2 (D/2)^2)``. Inputs and outputs are (B, H, T)."""
    length = source_lengths.to(device=center_hat.device, dtype=center_hat.dtype).view(-1, 1, 1)  # (B, 1, 1)
    return length * torch.sigmoid(center_hat), length * torch.sigmoid(width_hat) / 2


def mixture_mass_inside(omega: torch.Tensor, mu: torch.Tensor, sigma: torch.Tensor, *, source_lengths: torch.Tensor,
                        sigma_floor: float = 1e-2) -> torch.Tensor:
    """Fraction of the (continuous) mixture's mass inside the sentence ``[0, J]``, per query: (B, H, T).
    The paper's claim for approximate normalisation is that this stays above 0.9."""
    length = _lengths(source_lengths, mu)
    normal = torch.distributions.Normal(mu, sigma.clamp_min(sigma_floor))
    inside = normal.cdf(length) - normal.cdf(torch.zeros_like(length))  # (B, H, T, K)
    return (omega * inside).sum(-1) / omega.sum(-1)
