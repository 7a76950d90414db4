"""Bad calls to the fused attention operator ``mma_nmt::attention``, to the functional API, and straight to
``mma_nmt::attention_backward`` (autograd never makes those, but the operator is public) raise errors that name the
argument and what was expected."""

from __future__ import annotations

import pytest
import torch

from attention_cases import make_qkv
from mma_nmt.ops import fused_attention, parse_head_spec
from mma_nmt.ops.padding import right_padding_lengths

OP = torch.ops.mma_nmt.attention


def good_args():
    q, k, v = make_qkv(2, 4, 5, 6, 8, requires_grad=False)
    return dict(q=q, k=k, v=v, key_lengths=torch.tensor([6, 2]), head_kinds=[0, 1, 2, 3], window=1, scale=0.3)


def call(**changes):
    args = good_args()
    args.update(changes)
    return OP(args["q"], args["k"], args["v"], args["key_lengths"], args["head_kinds"], args["window"], args["scale"])


@pytest.mark.parametrize("changes,pattern", [
    (dict(q=torch.randn(2, 4, 5)), r"q must have shape \(batch, heads, query_len, head_dim\), got a 3-d"),
    (dict(k=torch.randn(3, 4, 6, 8)), r"k must have shape \[2, 4, 6, 8\]"),
    (dict(v=torch.randn(2, 3, 6, 8)), r"v must have shape \[2, 4, 6, 8\]"),
    (dict(k=torch.randn(2, 4, 6, 7)), r"k must have shape \[2, 4, 6, 8\]"),
    (dict(head_kinds=[0, 1]), r"head_kinds must give one kind per head \(4\), got 2"),
    (dict(head_kinds=[0, 1, 2, 9]), r"head_kinds entries must be in \[0, 5\)"),
    (dict(window=-1), r"window must be >= 0, got -1"),
    (dict(scale=0.0), r"scale must be positive"),
    (dict(key_lengths=torch.tensor([6, 7])), r"key_lengths must lie in \[0, key_len=6\]"),
    (dict(key_lengths=torch.tensor([6, -1])), r"key_lengths must lie in \[0, key_len=6\]"),
    (dict(key_lengths=torch.tensor([6])), r"key_lengths must have shape \(batch,\) = \(2,\)"),
    (dict(key_lengths=torch.tensor(6)), r"key_lengths must have shape \(batch,\) = \(2,\), got \[\]"),
    (dict(key_lengths=torch.tensor([[6, 2]])), r"key_lengths must have shape \(batch,\) = \(2,\)"),
    (dict(k=torch.randn(2, 4, 6)), r"k must have shape \(batch, heads, key_len, head_dim\), got a 3-d"),
    (dict(v=torch.randn(1, 2, 4, 6, 8)), r"v must have shape \(batch, heads, key_len, value_dim\), got a 5-d"),
    (dict(q=torch.tensor(1.0)), r"q must have shape \(batch, heads, query_len, head_dim\), got a 0-d"),
    (dict(v=torch.randn(2, 4, 5, 8)), r"v must have shape \[2, 4, 6, 8\], got \[2, 4, 5, 8\]"),
    (dict(v=torch.randn(1, 4, 6, 8)), r"v must have shape \[2, 4, 6, 8\]"),
    (dict(head_kinds=[-1, 0, 0, 0]), r"head_kinds entries must be in \[0, 5\)"),
    (dict(window=-(2**63)), r"window must be >= 0"),
    (dict(scale=-0.5), r"scale must be positive"),
    (dict(scale=float("nan")), r"scale must be positive and finite, got nan"),
    (dict(scale=float("inf")), r"scale must be positive and finite, got inf"),
    (dict(key_lengths=torch.tensor([-(2**63), 2])), r"key_lengths must lie in \[0, key_len=6\]"),
    (dict(key_lengths=torch.tensor([2**63 - 1, 2])), r"key_lengths must lie in \[0, key_len=6\]"),
    # empty tensors that do not fit the others are still named
    (dict(q=torch.randn(0, 4, 5, 8)), r"k must have shape \[0, 4, 6, 8\]"),
    (dict(k=torch.randn(2, 4, 6, 0)), r"k must have shape \[2, 4, 6, 8\], got \[2, 4, 6, 0\]"),
    (dict(q=torch.randn(2, 0, 5, 8)), r"k must have shape \[2, 0, 6, 8\]"),
    (dict(key_lengths=torch.zeros(0, dtype=torch.int64)), r"key_lengths must have shape \(batch,\) = \(2,\)"),
])
def test_bad_shapes_and_values_raise_value_errors(changes, pattern):
    with pytest.raises(ValueError, match=pattern):
        call(**changes)


@pytest.mark.parametrize("changes,pattern", [
    (dict(k=torch.randn(2, 4, 6, 8, dtype=torch.float64)), r"k must have dtype Float like q, got Double"),
    (dict(q=torch.randint(0, 3, (2, 4, 5, 8))), r"q must be a floating-point tensor"),
    (dict(q=torch.randn(2, 4, 5, 8).half(), k=torch.randn(2, 4, 6, 8).half(), v=torch.randn(2, 4, 6, 8).half()),
     r"on the CPU q must be float32 or float64"),
    (dict(key_lengths=torch.tensor([6, 2], dtype=torch.int32)), r"key_lengths must be int64"),
    (dict(key_lengths=torch.tensor([6.0, 2.0])), r"key_lengths must be int64, got Float"),
    (dict(v=torch.randn(2, 4, 6, 8, dtype=torch.float64)), r"v must have dtype Float like q, got Double"),
    (dict(q=torch.randn(2, 4, 5, 8) > 0), r"q must be a floating-point tensor, got Bool"),
    (dict(q=torch.randn(2, 4, 5, 8, dtype=torch.complex64)), r"q must be a floating-point tensor, got ComplexFloat"),
    (dict(q=torch.randn(2, 4, 5, 8).bfloat16(), k=torch.randn(2, 4, 6, 8).bfloat16(),
          v=torch.randn(2, 4, 6, 8).bfloat16()), r"on the CPU q must be float32 or float64, got BFloat16"),
])
def test_bad_dtypes_raise_type_errors(changes, pattern):
    with pytest.raises(TypeError, match=pattern):
        call(**changes)


@pytest.mark.parametrize("name", ["q", "k", "v", "key_lengths"])
def test_mixed_devices_raise(name):
    # The meta device stands in for a second device: a call mixing it with the CPU reaches the fake (meta) kernel.
    args = good_args()
    args[name] = args[name].to("meta")
    pattern = r"k is on cpu but q is on meta" if name == "q" else rf"{name} is on meta but q is on cpu"
    with pytest.raises(ValueError, match=pattern):
        call(**args)


@pytest.mark.parametrize("name", ["key_lengths", "key_padding_mask"])
def test_padding_on_another_device_raises_through_the_functional_api(name):
    q, k, v = make_qkv(2, 1, 3, 4, 8, requires_grad=False)
    padding = dict(key_lengths=torch.tensor([4, 1], device="meta"),
                   key_padding_mask=torch.zeros(2, 4, dtype=torch.bool, device="meta"))
    with pytest.raises(ValueError, match=rf"{name} is on meta but q is on cpu"):
        fused_attention(q, k, v, **{name: padding[name]})


@pytest.mark.parametrize("offset", [2**60 + 1, -(2**60) - 1, 2**63 - 1, -(2**63)])
def test_query_offset_out_of_range_raises(offset):
    args = good_args()
    with pytest.raises(ValueError, match=r"query_offset must lie in \[-2\^60, 2\^60\]"):
        OP(args["q"], args["k"], args["v"], None, args["head_kinds"], 1, 0.3, offset, 0.0, 0, False)


@pytest.mark.parametrize("p", [-0.1, float("nan"), float("inf")])
def test_dropout_probability_not_a_probability(p):
    args = good_args()
    with pytest.raises(ValueError, match=r"dropout_p must be in \[0, 1\)"):
        OP(args["q"], args["k"], args["v"], None, args["head_kinds"], 1, 0.3, 0, p, 0, False)


def test_wrong_rank_through_the_functional_api_names_q():
    _, k, v = make_qkv(2, 4, 5, 6, 8, requires_grad=False)
    for q in (torch.randn(1, 2, 4, 5, 8), torch.tensor(1.0)):
        with pytest.raises(ValueError, match=r"q must have shape \(batch, heads, query_len, head_dim\)"):
            fused_attention(q, k, v, head_kinds="GLFB")


def test_key_padding_mask_of_the_wrong_shape_is_named():
    q, k, v = make_qkv(2, 1, 3, 4, 8, requires_grad=False)
    for mask in (torch.zeros(3, 4, dtype=torch.bool), torch.zeros(2, 5, dtype=torch.bool)):
        with pytest.raises(ValueError, match=r"key_padding_mask must have shape \(batch, key_len\) = \(2, 4\)"):
            fused_attention(q, k, v, key_padding_mask=mask)
    with pytest.raises(ValueError, match=r"key_padding_mask must be a \(batch, key_len\) bool tensor"):
        fused_attention(q, k, v, key_padding_mask=torch.zeros(2, 4))


def test_key_lengths_of_a_float_dtype_are_rejected_by_the_functional_api():
    q, k, v = make_qkv(2, 1, 3, 4, 8, requires_grad=False)
    with pytest.raises(TypeError, match=r"key_lengths must be an integer tensor"):
        fused_attention(q, k, v, key_lengths=torch.tensor([4.0, 1.0]))


def test_unknown_head_kind_value_is_named():
    with pytest.raises(ValueError, match=r"head_spec entries must be HeadKind values 0..4"):
        parse_head_spec([0, 7], 2)


def test_seed_outside_int64_is_named():
    q, k, v = make_qkv(1, 1, 3, 3, 4, requires_grad=False)
    with pytest.raises(ValueError, match=r"^mma_nmt.attention: seed must be a 64-bit integer in \[-2\*\*63, "
                                         r"2\*\*63 - 1\], got 18446744073709551616$"):
        fused_attention(q, k, v, dropout_p=0.1, seed=2**64)


def test_non_integer_window_is_named():
    q, k, v = make_qkv(1, 1, 3, 3, 4, requires_grad=False)
    with pytest.raises(RuntimeError, match=r"argument 'window'"):
        fused_attention(q, k, v, head_kinds="L", window=1.5)


def test_dropout_probability_out_of_range():
    args = good_args()
    with pytest.raises(ValueError, match=r"dropout_p must be in \[0, 1\), got 1"):
        OP(args["q"], args["k"], args["v"], None, args["head_kinds"], 1, 0.3, 0, 1.0, 0, False)


@pytest.mark.parametrize("spec,pattern", [("GXLB", "letters G, L, F, B, C"), ("GLF", "neither equals nor divides"),
                                          ("", "non-empty")])
def test_bad_head_spec_names_the_problem(spec, pattern):
    with pytest.raises(ValueError, match=pattern):
        parse_head_spec(spec, 4)


def test_padding_mask_with_holes_is_rejected():
    q, k, v = make_qkv(1, 1, 3, 3, 4, requires_grad=False)
    with pytest.raises(ValueError, match="right padding"):
        fused_attention(q, k, v, key_padding_mask=torch.tensor([[False, True, False]]))


def test_right_padding_lengths_tells_right_padding_from_holes():
    """What the nn.MultiheadAttention drop-in reads a boolean key_padding_mask with: lengths for right padding (a row
    of padding only and an empty row included), None for a mask with holes, which then becomes a bias."""
    right = torch.tensor([[False, False, True], [True, True, True], [False, False, False]])
    assert right_padding_lengths(right).tolist() == [2, 0, 3]
    assert right_padding_lengths(right).dtype == torch.int64
    assert right_padding_lengths(torch.tensor([[False, True, False]])) is None
    assert right_padding_lengths(torch.tensor([[True, False, False]])) is None  # left padding
    assert right_padding_lengths(torch.zeros(2, 0, dtype=torch.bool)).tolist() == [0, 0]
    with pytest.raises(ValueError, match="bool tensor"):
        right_padding_lengths(torch.zeros(2, 3))


def test_a_kept_head_spec_is_a_fresh_list_and_errors_name_the_spec_as_given():
    kinds = parse_head_spec([0, 1], 4)
    kinds.append(9)  # the caller's list: the kept answer is not changed
    assert parse_head_spec([0, 1], 4) == parse_head_spec((0, 1), 4) == [0, 0, 1, 1]
    with pytest.raises(ValueError, match=r"head_spec \[0, 1, 2\] has 3 kinds"):
        parse_head_spec([0, 1, 2], 4)


def test_lengths_and_mask_together_are_rejected():
    q, k, v = make_qkv(1, 1, 3, 3, 4, requires_grad=False)
    with pytest.raises(ValueError, match="either as key_lengths or as key_padding_mask"):
        fused_attention(q, k, v, key_lengths=torch.tensor([3]), key_padding_mask=torch.zeros(1, 3, dtype=torch.bool))


@pytest.mark.parametrize("changes,pattern", [
    (dict(k=torch.randn(3, 4, 6, 8)), r"k must have shape \[2, 4, 6, 8\], got \[3, 4, 6, 8\]"),
    (dict(v=torch.randn(2, 4, 7, 8)), r"v must have shape \[2, 4, 6, 8\]"),
    (dict(q=torch.randn(2, 4, 5)), r"q must have shape \(batch, heads, query_len, head_dim\), got a 3-d"),
    (dict(head_kinds=[0]), r"head_kinds must give one kind per head \(4\), got 1"),
    (dict(key_lengths=torch.tensor([6, 2, 1])), r"key_lengths must have shape \(batch,\) = \(2,\)"),
])
def test_the_fake_kernel_rejects_what_the_cpu_kernel_rejects(changes, pattern):
    # All on meta: the fake kernel (used by torch.compile and for shape inference) runs instead of the CPU one.
    args = {**good_args(), **changes}
    meta = {name: (t.to("meta") if isinstance(t, torch.Tensor) else t) for name, t in args.items()}
    with pytest.raises(ValueError, match=pattern):
        call(**meta)
    with pytest.raises(ValueError, match=pattern):
        call(**args)


SELF_ATTENTION_PATTERN = (r"self_attention=True says the queries are the keys' own positions, which needs "
                          r"query_len == key_len and query_offset == 0; got query_len {}, key_len {}, "
                          r"query_offset {}")


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_self_attention_with_queries_that_are_not_the_keys_is_refused(device):
    # T != S, or T = S with an offset: the queries cannot be the keys' own positions. On meta the fake kernel says so.
    args = {name: (t.to(device) if isinstance(t, torch.Tensor) else t) for name, t in good_args().items()}
    q, k, v = args["q"], args["k"], args["v"]
    with pytest.raises(ValueError, match=SELF_ATTENTION_PATTERN.format(5, 6, 0)):
        OP(q, k, v, args["key_lengths"], args["head_kinds"], 1, 0.3, 0, 0.0, 0, False, True)
    square_k, square_v = k[:, :, :5], v[:, :, :5]
    with pytest.raises(ValueError, match=SELF_ATTENTION_PATTERN.format(5, 5, 2)):
        OP(q, square_k, square_v, None, args["head_kinds"], 1, 0.3, 2, 0.0, 0, False, True)
    if device == "cpu":
        with pytest.raises(ValueError, match=SELF_ATTENTION_PATTERN.format(5, 6, 0)):
            fused_attention(q, k, v, head_kinds="GLFB", self_attention=True)
    # T = S without an offset is accepted
    out, _, _ = OP(q, square_k, square_v, torch.tensor([5, 2], device=device), args["head_kinds"], 1, 0.3, 0, 0.0, 0,
                   False, True)
    assert tuple(out.shape) == (2, 4, 5, 8)


BACKWARD = torch.ops.mma_nmt.attention_backward


def backward_good_args():
    q, k, v = make_qkv(2, 4, 5, 6, 8, value_dim=3, requires_grad=False)
    lengths = torch.tensor([6, 2])
    out, lse, _ = OP(q, k, v, lengths, [0, 1, 2, 3], 1, 0.3, 0, 0.0, 0, False)
    return dict(grad_out=torch.randn_like(out), q=q, k=k, v=v, out=out, lse=lse, key_lengths=lengths,
                head_kinds=[0, 1, 2, 3], window=1, scale=0.3, query_offset=0, dropout_p=0.0, seed=0)


def call_backward(**changes):
    args = backward_good_args()
    args.update(changes)
    return BACKWARD(*args.values())


def test_backward_good_arguments_are_accepted():
    grads = call_backward()
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
def test_backward_bad_shapes_and_values_raise_value_errors(changes, pattern):
    with pytest.raises(ValueError, match=pattern):
        call_backward(**changes)


@pytest.mark.parametrize("changes,pattern", [
    (dict(grad_out=torch.randn(2, 4, 5, 3, dtype=torch.float64)), r"grad_out must have dtype Float like q, got Double"),
    (dict(out=torch.randn(2, 4, 5, 3, dtype=torch.float64)), r"out must have dtype Float like q, got Double"),
    (dict(lse=torch.randn(2, 4, 5, dtype=torch.float64)), r"lse must have dtype Float, got Double"),
    (dict(key_lengths=torch.tensor([6, 2], dtype=torch.int32)), r"key_lengths must be int64"),
    (dict(q=torch.randint(0, 3, (2, 4, 5, 8))), r"q must be a floating-point tensor"),
])
def test_backward_bad_dtypes_raise_type_errors(changes, pattern):
    with pytest.raises(TypeError, match=pattern):
        call_backward(**changes)


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_backward_self_attention_with_queries_that_are_not_the_keys_is_refused(device):
    args = {name: (t.to(device) if isinstance(t, torch.Tensor) else t) for name, t in backward_good_args().items()}
    with pytest.raises(ValueError, match=r"attention_backward: " + SELF_ATTENTION_PATTERN.format(5, 6, 0)):
        BACKWARD(*args.values(), True)


def test_backward_half_precision_on_the_cpu_is_named():
    args = backward_good_args()
    half = {name: args[name].half() for name in ("grad_out", "q", "k", "v", "out")}
    with pytest.raises(TypeError, match=r"attention_backward: on the CPU q must be float32 or float64, got Half"):
        call_backward(**half)


@pytest.mark.parametrize("name", ["grad_out", "k", "v", "out", "lse", "key_lengths"])
def test_backward_mixed_devices_raise(name):
    args = backward_good_args()
    with pytest.raises(ValueError, match=rf"attention_backward: {name} is on meta but q is on cpu"):
        call_backward(**{name: args[name].to("meta")})


@pytest.mark.parametrize("changes,pattern", [
    (dict(grad_out=torch.randn(2, 4, 5, 8)), r"grad_out must have shape \[2, 4, 5, 3\], got \[2, 4, 5, 8\]"),
    (dict(out=torch.randn(2, 4, 5)), r"out must have shape \[2, 4, 5, 3\]"),
    (dict(lse=torch.randn(2, 3, 5)), r"lse must have shape"),
    (dict(k=torch.randn(2, 4, 6, 7)), r"k must have shape \[2, 4, 6, 8\]"),
])
def test_backward_the_fake_kernel_rejects_what_the_cpu_kernel_rejects(changes, pattern):
    args = {**backward_good_args(), **changes}
    with pytest.raises(ValueError, match=pattern):
        BACKWARD(*[t.to("meta") if isinstance(t, torch.Tensor) else t for t in args.values()])
