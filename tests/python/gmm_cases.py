"""Input builders shared by the GMM attention tests: random but realistic operator inputs, converted from random network
outputs exactly as the module converts them (mma_nmt.ops.gmm_conversion)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mma_nmt.ops import gmm_conversion
from mma_nmt.ops.gmm_normalization import GmmNormalization


@dataclass(frozen=True)
class Shape:
    batch: int = 2
    heads: int = 2
    query_len: int = 5
    key_len: int = 7
    head_dim: int = 8
    value_dim: int = 6
    components: int = 2
    lengths: tuple[int, ...] | None = (7, 3)  # None: no padding


def make_inputs(shape: Shape, *, normalization: GmmNormalization = "approximate", local: bool = False,
                dtype=torch.float64, seed: int = 0) -> dict:
    """Keyword arguments of ``gmm_attention`` / ``gmm_attention_reference`` (differentiable leaves where they should
    be). ``normalization`` is the operator's (mma_nmt.ops.gmm_normalization); network outputs go through its
    conversion (the synthesis network's for "unnormalised")."""
    gen = torch.Generator().manual_seed(seed)
    B, H, T, S = shape.batch, shape.heads, shape.query_len, shape.key_len

    def randn(*size, std=1.0):
        return torch.randn(*size, generator=gen, dtype=torch.float64) * std

    lengths = torch.tensor(shape.lengths, dtype=torch.int64) if shape.lengths is not None else None
    source = lengths if lengths is not None else torch.full((B,), S, dtype=torch.int64)
    hats = [randn(B, H, T, shape.components) for _ in range(3)]
    if normalization == "approximate":
        omega, mu, sigma = gmm_conversion.approximate_mixture(*hats, source_lengths=source)
    elif normalization == "strict":
        omega, mu, sigma = gmm_conversion.strict_mixture(*hats, source_lengths=source)
    else:
        omega, mu, sigma = gmm_conversion.synthesis_mixture(hats[0], hats[1] - 0.5, hats[2] - 1.0)
    inputs = dict(q=randn(B, H, T, shape.head_dim), k=randn(B, H, S, shape.head_dim), v=randn(B, H, S, shape.value_dim),
                  omega=omega, mu=mu, sigma=sigma.clamp_min(0.2), gate=torch.sigmoid(randn(B, H, T)))
    if local:
        center, width = gmm_conversion.localness_bias(randn(B, H, T), randn(B, H, T), source)
        inputs.update(local_center=center, local_width=width.clamp_min(0.3))
    inputs = {name: t.to(dtype).detach().requires_grad_() for name, t in inputs.items()}
    inputs["key_lengths"] = lengths
    inputs["normalization"] = normalization
    return inputs


DIFFERENTIABLE = ("q", "k", "v", "omega", "mu", "sigma", "gate", "local_center", "local_width")


def grads_of(out: torch.Tensor, inputs: dict, grad_out: torch.Tensor) -> dict:
    """Gradients of ``(out * grad_out).sum()`` with respect to every differentiable input present."""
    names = [n for n in DIFFERENTIABLE if n in inputs]
    grads = torch.autograd.grad(out, [inputs[n] for n in names], grad_out, allow_unused=True)
    return {n: (g if g is not None else torch.zeros_like(inputs[n])) for n, g in zip(names, grads)}
