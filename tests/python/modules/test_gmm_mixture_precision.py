"""The GMM module computes its mixture in float32 beside half-precision queries (under autocast, or a bfloat16
model): the means are source positions, which bfloat16 could only name every second one from 256 on. The operator
takes that mixture beside bfloat16 q, k and v on CUDA (tests/python/ops/test_ops_cuda_autocast.py, and
tests/cpp/emulated for the kernels); here CPU autocast stands in for CUDA's, which casts the same layers."""

from __future__ import annotations

import pytest
import torch

from mma_nmt.modules import GmmAttentionConfig, GmmCrossAttention
from mma_nmt.modules.gmm_predictors import MixturePredictor
from test_gmm_cross_attention import VARIANTS as MODULE_VARIANTS

# the variants whose predictor builds a mixture, a gate or a logit bias ("dot_only" builds none)
VARIANTS = {name: fields for name, fields in MODULE_VARIANTS.items()
            if name in ("default", "strict", "unnormalised", "hard_coded", "localness", "average_gate", "mixture_only",
                        "share_mean")}


def _predict(variant: str, q: torch.Tensor, lengths: torch.Tensor):
    torch.manual_seed(0)
    config = GmmAttentionConfig(embed_dim=16, num_heads=2, **VARIANTS[variant])
    return MixturePredictor(config, head_dim=8).to(q.dtype if q.dtype == torch.float64 else torch.float32)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_the_mixture_is_float32_beside_bfloat16_queries_under_autocast(variant):
    q = torch.randn(2, 2, 3, 8)
    lengths = torch.tensor([300, 5])
    predictor = _predict(variant, q, lengths)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        params = predictor(q, lengths)
    tensors = [t for t in (params.omega, params.mu, params.sigma, params.gate, params.local_center,
                           params.local_width) if t is not None]
    assert {t.dtype for t in tensors} == {torch.float32}
    # a bfloat16 model (no autocast) gets the same float32 mixture
    bf16 = predictor.to(torch.bfloat16)(q.to(torch.bfloat16), lengths)
    assert bf16.mu.dtype == torch.float32 and bf16.gate.dtype == torch.float32


def test_means_far_into_a_long_sentence_keep_their_position():
    """J sigmoid(mu^) for J = 300: in float32 the means come out as computed from the networks' (bfloat16) outputs;
    rounded to bfloat16 they would snap to even positions."""
    q = torch.randn(4, 2, 6, 8)
    lengths = torch.tensor([300, 300, 299, 301])
    predictor = _predict("default", q, lengths)
    with torch.no_grad():
        predictor.mean.out.bias.fill_(2.0)  # sigmoid about 0.88: means about 264
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mu = predictor(q, lengths).mu
        mu_hat = predictor.networks(q)["mean"]
    assert mu_hat.dtype == torch.float32  # the networks' outputs, cast once
    expected = lengths.view(-1, 1, 1, 1).float() * torch.sigmoid(mu_hat)
    torch.testing.assert_close(mu, expected, rtol=0, atol=0)
    far = mu[mu > 256]
    assert far.numel() > 0 and (far.to(torch.bfloat16).float() - far).abs().max() > 0.25, "bfloat16 would move them"


def test_a_bfloat16_reference_module_runs_beside_its_float32_mixture():
    """The plain-PyTorch reference takes the mixed dtypes too (gamma v in v's dtype), without autocast."""
    torch.manual_seed(0)
    module = GmmCrossAttention(GmmAttentionConfig(embed_dim=16, num_heads=2, implementation="reference"))
    module = module.to(torch.bfloat16)
    query, memory = torch.randn(2, 5, 16, dtype=torch.bfloat16), torch.randn(2, 9, 16, dtype=torch.bfloat16)
    out, weights = module(query, memory, key_lengths=torch.tensor([9, 4]), need_weights=True)
    assert out.dtype == torch.bfloat16 and weights["beta"].dtype == torch.float32
    assert torch.isfinite(out).all()
