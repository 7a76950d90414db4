"""Input builders and the accuracy rule shared by the fused-attention tests."""

from __future__ import annotations

import torch

from mma_nmt.reference import attention_reference


def make_qkv(batch, heads, query_len, key_len, head_dim, *, value_dim=None, dtype=torch.float32, non_contiguous=False,
             requires_grad=True):
    """Random q (B, H, T, D), k (B, H, S, D), v (B, H, S, Dv); optionally as non-contiguous views of larger tensors."""
    value_dim = head_dim if value_dim is None else value_dim

    def one(length, dim):
        if non_contiguous:  # (B, L, H, 2*dim) -> transposed, every other feature
            base = torch.randn(batch, length, heads, 2 * dim, dtype=dtype)
            t = base.transpose(1, 2)[..., ::2]
            assert not t.is_contiguous()
        else:
            t = torch.randn(batch, heads, length, dim, dtype=dtype)
        return t.detach().requires_grad_(requires_grad) if not non_contiguous else t.requires_grad_(requires_grad)

    return one(query_len, head_dim), one(key_len, head_dim), one(key_len, value_dim)


def padded_lengths(batch, key_len):
    """Lengths with a full sentence first and (when batch > 1) a length-1 sentence last."""
    lengths = torch.randint(1, key_len + 1, (batch,))
    lengths[0] = key_len
    if batch > 1:
        lengths[-1] = 1
    return lengths


def reference_in_double(q, k, v, **kwargs):
    """Reference output and input gradients computed in float64 from the same values."""
    q64, k64, v64 = (t.detach().double().requires_grad_() for t in (q, k, v))
    out, _ = attention_reference(q64, k64, v64, **kwargs)
    return out, (q64, k64, v64)


def assert_close_to_double(actual, low_precision_ref, double_ref, name, floor=1e-5):
    """flash-attention's accuracy rule: the kernel's error against a float64 reference is at most twice that of plain
    PyTorch at the kernel's precision (plus a small floor for errors that are tiny on both sides)."""
    kernel_error = (actual.double() - double_ref).abs().max().item()
    torch_error = (low_precision_ref.double() - double_ref).abs().max().item()
    assert kernel_error <= 2 * torch_error + floor, f"{name}: kernel error {kernel_error:.3g} vs torch {torch_error:.3g}"


def assert_fused_matches_reference(q, k, v, *, weights: bool = True, **options):
    """mma_nmt.attention's output, weights and the gradients of q, k and v against the plain-PyTorch reference with
    the same options, on q's device: in float64 within 1e-10 (gradients 1e-9); in float32 by the accuracy rule of
    :func:`assert_close_to_double` (error against a float64 reference at most twice the float32 reference's).
    ``weights=False`` does not ask for the weights, whose request changes the path a CUDA call takes."""
    from mma_nmt.ops import fused_attention

    result = fused_attention(q, k, v, return_probs=weights, **options)
    grad_out = torch.randn_like(result.out)
    grads = torch.autograd.grad(result.out, (q, k, v), grad_out)
    ref_out, ref_probs = attention_reference(q, k, v, **options)  # plain PyTorch at the kernel's precision
    ref_grads = torch.autograd.grad(ref_out, (q, k, v), grad_out)
    if q.dtype == torch.float64:
        torch.testing.assert_close(result.out, ref_out, rtol=1e-10, atol=1e-10)
        if weights:
            torch.testing.assert_close(result.probs, ref_probs, rtol=1e-10, atol=1e-10)
        for name, got, want in zip("qkv", grads, ref_grads):
            torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-9, msg=lambda m: f"grad_{name}: {m}")
        return
    double_out, double_inputs = reference_in_double(q, k, v, **options)
    double_grads = torch.autograd.grad(double_out, double_inputs, grad_out.double())
    assert_close_to_double(result.out, ref_out, double_out, "out")
    for name, got, low, high in zip("qkv", grads, ref_grads, double_grads):
        assert_close_to_double(got, low, high, f"grad_{name}")
    if weights:
        assert_close_to_double(result.probs, ref_probs, attention_reference(*double_inputs, **options)[1], "probs")
