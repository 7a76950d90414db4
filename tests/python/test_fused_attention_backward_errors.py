"""Bad calls straight to ``mma_nmt::attention_backward`` (autograd never makes them, but the operator is public) raise
errors that name the argument."""

from __future__ import annotations

import pytest
import torch

from attention_cases import make_qkv

FORWARD = torch.ops.mma_nmt.attention
BACKWARD = torch.ops.mma_nmt.attention_backward


def good_args():
    q, k, v = make_qkv(2, 4, 5, 6, 8, value_dim=3, requires_grad=False)
    lengths = torch.tensor([6, 2])
    out, lse, _ = FORWARD(q, k, v, lengths, [0, 1, 2, 3], 1, 0.3, 0, 0.0, 0, False)
    return dict(grad_out=torch.randn_like(out), q=q, k=k, v=v, out=out, lse=lse, key_lengths=lengths,
                head_kinds=[0, 1, 2, 3], window=1, scale=0.3, query_offset=0, dropout_p=0.0, seed=0)


def call(**changes):
    args = good_args()
    args.update(changes)
    return BACKWARD(*args.values())


def test_good_arguments_are_accepted():
    grads = call()
    assert [tuple(g.shape) for g in grads] == [(2, 4, 5, 8), (2, 4, 6, 8), (2, 4, 6, 3)]


@pytest.mark.parametrize("changes,pattern", [
    (dict(grad_out=torch.randn(2, 4, 5)), r"grad_out must have shape \[2, 4, 5, 3\], got \[2, 4, 5\]"),
    (dict(grad_out=torch.randn(2, 4, 5, 8)), r"grad_out must have shape \[2, 4, 5, 3\]"),
    (dict(out=torch.randn(2, 4, 4, 3)), r"out must have shape \[2, 4, 5, 3\]"),
    (dict(out=torch.randn(1, 4, 5, 3)), r"out must have shape \[2, 4, 5, 3\]"),
    (dict(lse=torch.randn(2, 4)), r"lse must have shape \(batch, heads, query_len\), got \[2, 4\]"),
    (dict(lse=torch.randn(2, 3, 5)), r"lse must have shape \(batch, heads, query_len\)"),
    (dict(q=torch.randn(2, 4, 5)), r"q must have shape \(batch, heads, query_len, head_dim\), got a 3-d"),
    (dict(k=torch.randn(3, 4, 6, 8)), r"k must have shape \[2, 4, 6, 8\]"),
    (dict(v=torch.randn(2, 2, 6, 3)), r"v must have shape \[2, 4, 6, 3\]"),
    (dict(k=torch.randn(2, 4, 6, 7)), r"k must have shape \[2, 4, 6, 8\]"),
    (dict(head_kinds=[0, 1, 2]), r"head_kinds must give one kind per head \(4\), got 3"),
    (dict(head_kinds=[0, 1, 2, 5]), r"head_kinds entries must be in \[0, 5\)"),
    (dict(window=-3), r"window must be >= 0, got -3"),
    (dict(scale=0.0), r"scale must be positive"),
    (dict(query_offset=2**63 - 1), r"query_offset must lie in"),
    (dict(dropout_p=1.5), r"dropout_p must be in \[0, 1\)"),
    (dict(key_lengths=torch.tensor([7, 2])), r"key_lengths must lie in \[0, key_len=6\]"),
    (dict(key_lengths=torch.tensor([-1, 2])), r"key_lengths must lie in \[0, key_len=6\]"),
    (dict(key_lengths=torch.tensor([6, 2, 1])), r"key_lengths must have shape \(batch,\) = \(2,\)"),
    (dict(grad_out=torch.randn(2, 4, 5, 0)), r"grad_out must have shape \[2, 4, 5, 3\], got \[2, 4, 5, 0\]"),
])
def test_bad_shapes_and_values_raise_value_errors(changes, pattern):
    with pytest.raises(ValueError, match=pattern):
        call(**changes)


@pytest.mark.parametrize("changes,pattern", [
    (dict(grad_out=torch.randn(2, 4, 5, 3, dtype=torch.float64)), r"grad_out must have dtype Float like q, got Double"),
    (dict(out=torch.randn(2, 4, 5, 3, dtype=torch.float64)), r"out must have dtype Float like q, got Double"),
    (dict(lse=torch.randn(2, 4, 5, dtype=torch.float64)), r"lse must have dtype Float, got Double"),
    (dict(key_lengths=torch.tensor([6, 2], dtype=torch.int32)), r"key_lengths must be int64"),
    (dict(q=torch.randint(0, 3, (2, 4, 5, 8))), r"q must be a floating-point tensor"),
])
def test_bad_dtypes_raise_type_errors(changes, pattern):
    with pytest.raises(TypeError, match=pattern):
        call(**changes)


def test_half_precision_on_the_cpu_is_named():
    args = good_args()
    half = {name: args[name].half() for name in ("grad_out", "q", "k", "v", "out")}
    with pytest.raises(TypeError, match=r"attention_backward: on the CPU q must be float32 or float64, got Half"):
        call(**half)


@pytest.mark.parametrize("name", ["grad_out", "k", "v", "out", "lse", "key_lengths"])
def test_mixed_devices_raise(name):
    args = good_args()
    with pytest.raises(ValueError, match=rf"attention_backward: {name} is on meta but q is on cpu"):
        call(**{name: args[name].to("meta")})


@pytest.mark.parametrize("changes,pattern", [
    (dict(grad_out=torch.randn(2, 4, 5, 8)), r"grad_out must have shape \[2, 4, 5, 3\], got \[2, 4, 5, 8\]"),
    (dict(out=torch.randn(2, 4, 5)), r"out must have shape \[2, 4, 5, 3\]"),
    (dict(lse=torch.randn(2, 3, 5)), r"lse must have shape"),
    (dict(k=torch.randn(2, 4, 6, 7)), r"k must have shape \[2, 4, 6, 8\]"),
])
def test_the_fake_kernel_rejects_what_the_cpu_kernel_rejects(changes, pattern):
    args = {**good_args(), **changes}
    with pytest.raises(ValueError, match=pattern):
        BACKWARD(*[t.to("meta") if isinstance(t, torch.Tensor) else t for t in args.values()])
