"""The CUDA kernels of mma_nmt::attention against the plain-PyTorch reference. Skipped without a GPU (the CUDA build is
proven to compile and register by .ci/cuda_build_check.sh); run on any machine that has one."""

from __future__ import annotations

import itertools

import pytest
import torch

import mma_nmt
from mma_nmt.ops import fused_attention
from mma_nmt.ops.head_spec import parse_head_spec
from mma_nmt.reference import attention_reference

pytestmark = pytest.mark.skipif(
    not (torch.cuda.is_available() and mma_nmt.build_info()["cuda"]), reason="needs a GPU and the CUDA build"
)

# (atol for outputs and gradients) per dtype; half precision rounds the inputs, the kernels accumulate in float.
TOLERANCE = {torch.float64: 1e-10, torch.float32: 1e-4, torch.float16: 2e-2, torch.bfloat16: 1e-1}
CASES = list(itertools.product(["GLFB", "C"], [0, 2], [(1, 1), (7, 7), (5, 40), (37, 9)], [False, True], [0.0, 0.3]))


def _inputs(batch, heads, query_len, key_len, head_dim, value_dim, dtype, seed=0):
    generator = torch.Generator().manual_seed(seed)
    shapes = [(batch, heads, query_len, head_dim), (batch, heads, key_len, head_dim), (batch, heads, key_len, value_dim)]
    return [torch.randn(s, generator=generator, dtype=torch.float64).to("cuda", dtype).requires_grad_() for s in shapes]


def _compare(dtype, spec, window, query_len, key_len, padded, dropout_p, head_dim=6, value_dim=5):
    heads = 4 if spec == "GLFB" else 1
    kinds = parse_head_spec(spec, heads)
    q, k, v = _inputs(2, heads, query_len, key_len, head_dim, value_dim, dtype)
    lengths = torch.tensor([key_len, max(key_len - 3, 0)], device="cuda") if padded else None
    options = dict(head_kinds=kinds, key_lengths=lengths, window=window, query_offset=key_len - query_len if spec == "C"
                   else 0, dropout_p=dropout_p, seed=7)
    result = fused_attention(q, k, v, return_probs=True, **options)
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    ref_out, ref_probs = attention_reference(q64, k64, v64, **options)
    grad = torch.randn_like(ref_out)
    grads = torch.autograd.grad(result.out, (q, k, v), grad.to(dtype))
    ref_grads = torch.autograd.grad(ref_out, (q64, k64, v64), grad)
    atol = TOLERANCE[dtype]
    torch.testing.assert_close(result.out.double(), ref_out, atol=atol, rtol=atol)
    torch.testing.assert_close(result.probs.double(), ref_probs, atol=atol, rtol=atol)
    for got, want in zip(grads, ref_grads):
        torch.testing.assert_close(got.double(), want, atol=atol * 10, rtol=atol)


@pytest.mark.parametrize("spec, window, sizes, padded, dropout_p", CASES)
def test_cuda_attention_matches_reference_float64(spec, window, sizes, padded, dropout_p):
    _compare(torch.float64, spec, window, *sizes, padded, dropout_p)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("head_dim, value_dim", [(6, 5), (64, 64), (200, 256)])
def test_cuda_attention_matches_reference_in_low_precision(dtype, head_dim, value_dim):
    _compare(dtype, "GLFB", 1, 9, 33, True, 0.0, head_dim=head_dim, value_dim=value_dim)


def test_cuda_fully_masked_rows_give_zero_output_and_gradient():
    q, k, v = _inputs(1, 2, 4, 6, 8, 8, torch.float32)
    lengths = torch.tensor([0], device="cuda")  # no real key at all
    result = fused_attention(q, k, v, head_kinds="GL", key_lengths=lengths)
    assert torch.equal(result.out, torch.zeros_like(result.out))
    assert torch.isneginf(result.lse).all()
    grads = torch.autograd.grad(result.out.sum(), (q, k, v))
    assert all(torch.equal(g, torch.zeros_like(g)) for g in grads)


def test_cuda_clamps_out_of_range_key_lengths():
    q, k, v = _inputs(2, 1, 3, 5, 4, 4, torch.float64)
    too_long = fused_attention(q, k, v, key_lengths=torch.tensor([9, -1], device="cuda")).out
    clamped = fused_attention(q, k, v, key_lengths=torch.tensor([5, 0], device="cuda")).out
    torch.testing.assert_close(too_long, clamped)


def test_cuda_rejects_head_size_above_256():
    q, k, v = _inputs(1, 1, 2, 2, 257, 4, torch.float32)
    with pytest.raises(ValueError, match="head sizes up to 256"):
        fused_attention(q, k, v)
