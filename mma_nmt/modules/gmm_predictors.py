"""Predictor networks of GMM cross-attention (paper eqs. 7-9 and 14) and the variant-specific conversion of their
outputs into the operator's inputs. Weights are shared across heads: each network reads one head's query (size D) and
is applied to every head alike.

The mixture is computed in float32 where the queries are half precision (a bfloat16 model, or the networks' linear
layers under autocast): the means are source positions, and ``J sigmoid(mu^)`` in bfloat16 could only name every
second position from 256 on (every position from 128 on). The operator takes such a mixture beside half-precision
q, k and v on CUDA (:mod:`mma_nmt.ops.gmm_attention`)."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn
from torch.nn import functional as F

from mma_nmt.ops import gmm_conversion
from mma_nmt.ops.gmm_normalization import GmmNormalization


class MixtureParams(NamedTuple):
    omega: torch.Tensor  # (B, H, T, K)
    mu: torch.Tensor  # (B, H, T, K)
    sigma: torch.Tensor  # (B, H, T, K)
    gate: torch.Tensor  # (B, H, T)
    local_center: torch.Tensor | None  # (B, H, T), localness variant only
    local_width: torch.Tensor | None  # (B, H, T), localness variant only
    normalization: GmmNormalization  # the operator's: "approximate", "strict" or "unnormalised"


def mixture_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype the mixture is computed in beside queries of ``dtype``: float32 for float16/bfloat16, else theirs."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _in_mixture_dtype(x: torch.Tensor) -> torch.Tensor:
    return x.to(mixture_dtype(x.dtype))


class FeedForwardHead(nn.Module):
    """``V^T tanh(W^T x + b1) + b2``: (..., D) -> (..., out_features)."""

    def __init__(self, dim: int, out_features: int):
        super().__init__()
        self.hidden = nn.Linear(dim, dim)
        self.out = nn.Linear(dim, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.tanh(self.hidden(x)))


class MixturePredictor(nn.Module):
    """Predicts the mixture (omega, mu, sigma), the gate and, for the localness variant, the logit bias from the
    projected queries ``q`` (B, H, T, D). Networks whose output a variant does not use are not created."""

    def __init__(self, config, head_dim: int):
        super().__init__()
        self.config = config
        K = config.num_components
        learned_mixture = config.attention in ("gmm", "mixture")
        self.weight = FeedForwardHead(head_dim, 1 if config.share_weight else K) if learned_mixture else None
        self.mean = FeedForwardHead(head_dim, 1 if config.share_mean else K) if learned_mixture else None
        self.std = FeedForwardHead(head_dim, 1 if config.share_variance else K) if learned_mixture else None
        learned_gate = config.attention == "gmm" and config.gate == "learned"
        self.gate = FeedForwardHead(head_dim, 1) if learned_gate else None
        self.local = FeedForwardHead(head_dim, 2) if config.attention == "localness" else None

    def forward(self, q: torch.Tensor, lengths: torch.Tensor, *, step: int = 0,
                state: dict | None = None) -> MixtureParams:
        """``lengths`` (B,) true source lengths; ``step`` the target position of q's first row; ``state`` the
        incremental-decoding dict (the synthesis network keeps its last means there)."""
        kind = self.config.attention
        if kind == "hard_coded":
            return self.hard_coded(q, lengths, step)
        if kind == "localness":
            return self.localness(q, lengths)
        outputs = self.networks(q)
        omega, mu, sigma = self.mixture(q, lengths, state, outputs)
        gate = self.gate_of(q, outputs.get("gate"))
        return MixtureParams(omega, mu, sigma, gate, None, None, self.config.normalization)

    def networks(self, q: torch.Tensor) -> dict[str, torch.Tensor]:
        """The outputs (B, H, T, out) of the mixture and gate networks, computed together: the hidden layers as one
        GEMM with their stacked weights (B*H*T, D) x (D, n*D), the output layers as one with their block-diagonal
        weights, instead of 2n small GEMMs each copying the strided q. Same parameters and values as calling each
        network."""
        names = [n for n in ("weight", "mean", "std", "gate") if getattr(self, n) is not None]
        nets = [getattr(self, n) for n in names]
        if len(nets) == 1:
            return {names[0]: _in_mixture_dtype(nets[0](q))}
        hidden = torch.tanh(F.linear(q, torch.cat([n.hidden.weight for n in nets]),
                                     torch.cat([n.hidden.bias for n in nets])))  # (B, H, T, n*D)
        out = F.linear(hidden, torch.block_diag(*(n.out.weight for n in nets)),
                       torch.cat([n.out.bias for n in nets]))  # (B, H, T, sum out)
        out = _in_mixture_dtype(out)  # one cast of all the networks' outputs
        return dict(zip(names, out.split([n.out.out_features for n in nets], dim=-1)))

    def mixture(self, q, lengths, state, outputs):
        K = self.config.num_components
        w_hat = outputs["weight"].expand(*q.shape[:-1], K)  # (B, H, T, K); shared weight -> uniform omega
        mu_hat = outputs["mean"].expand(*q.shape[:-1], K)
        sigma_hat = outputs["std"].expand(*q.shape[:-1], K)
        norm = self.config.normalization
        if norm == "approximate":
            return gmm_conversion.approximate_mixture(w_hat, mu_hat, sigma_hat, source_lengths=lengths)
        if norm == "strict":
            return gmm_conversion.strict_mixture(w_hat, mu_hat, sigma_hat, source_lengths=lengths)
        # "unnormalised": Graves' synthesis network
        previous = state.get("previous_mu") if state is not None else None
        omega, mu, sigma = gmm_conversion.synthesis_mixture(w_hat, mu_hat, sigma_hat, previous_mu=previous)
        if state is not None:
            state["previous_mu"] = mu[:, :, -1:].detach()  # (B, H, 1, K)
        return omega, mu, sigma

    def gate_of(self, q: torch.Tensor, output: torch.Tensor | None = None) -> torch.Tensor:
        """(B, H, T): learned ``sigmoid(FFN(q))`` (``output`` = the network's output if already computed), 0.5 for
        average gating, 1 for mixture-only attention."""
        if self.gate is not None:
            return torch.sigmoid(_in_mixture_dtype(self.gate(q)) if output is None else output).squeeze(-1)
        value = 0.5 if self.config.attention == "gmm" else 1.0
        return q.new_full(q.shape[:-1], value, dtype=mixture_dtype(q.dtype))

    def hard_coded(self, q, lengths, step):
        batch, heads, query_len, _ = q.shape
        positions = torch.arange(step, step + query_len, device=q.device)  # (T,)
        omega, mu, sigma = gmm_conversion.hard_coded_mixture(positions, lengths, heads,
                                                             length_ratio=self.config.length_ratio,
                                                             sigma=self.config.hard_coded_sigma)
        cast = dict(dtype=mixture_dtype(q.dtype), device=q.device)
        gate = q.new_ones(batch, heads, query_len, dtype=cast["dtype"])  # the Gaussian replaces dot-product attention
        return MixtureParams(omega.to(**cast), mu.to(**cast), sigma.to(**cast), gate, None, None, "strict")

    def localness(self, q, lengths):
        center_hat, width_hat = _in_mixture_dtype(self.local(q)).unbind(-1)  # (B, H, T) each
        center, width = gmm_conversion.localness_bias(center_hat, width_hat, lengths)
        zeros = center.new_zeros(*q.shape[:-1], 1)  # (B, H, T, 1): no mixture, gate 0
        ones = torch.ones_like(zeros)
        return MixtureParams(zeros, zeros, ones, center.new_zeros(q.shape[:-1]), center, width, "approximate")
