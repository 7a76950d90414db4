"""mma_nmt::multilayer_attention (MLMHA's attention over n encoder layers, SPEC section 3) against its plain-PyTorch
contract (reference/multilayer_attention.py): outputs, weights and gradients on odd shapes, padding, sentences without
keys and length 1; gradcheck in float64; opcheck; the errors of bad calls. The CUDA path (the same contract through
mma_nmt::attention on arranged projections) is checked against the CPU kernel by tests/cpp/test_multilayer_op.cpp."""

import pytest
import torch

from attention_cases import assert_close_to_double
from mma_nmt.ops import multilayer_attention
from mma_nmt.reference import multilayer_attention_op_reference

FORWARD = torch.ops.mma_nmt.multilayer_attention.default
BACKWARD = torch.ops.mma_nmt.multilayer_attention_backward.default

SHAPES = [  # (B, T, S, H, D, Dv, n)
    (2, 5, 7, 2, 3, 3, 3),     # odd sizes
    (3, 1, 9, 4, 8, 5, 2),     # one decoder step, Dv != D
    (1, 1, 1, 1, 1, 1, 1),     # one of everything
    (2, 17, 33, 2, 16, 16, 4),  # more than one query block and vector of keys
    (2, 40, 130, 1, 5, 7, 2),  # more than one key tile
]
# (layer_specific, value sets): joint weights with one value set per layer or with the values summed beforehand,
# layer-specific weights
MODES = [(False, "per layer"), (False, "summed"), (True, "per layer")]


def _inputs(shape, mode, dtype, seed=0):
    batch, steps, src_len, heads, dim, value_dim, layers = shape
    gen = torch.Generator().manual_seed(seed)
    make = lambda *s: torch.randn(*s, generator=gen, dtype=dtype).requires_grad_()  # noqa: E731
    q = [make(batch, steps, heads * dim) for _ in range(layers)]
    k = [make(batch, src_len, heads * dim) for _ in range(layers)]
    v = [make(batch, src_len, heads * value_dim) for _ in range(1 if mode[1] == "summed" else layers)]
    return q, k, v


def _lengths(batch, src_len, with_empty=False):
    lengths = [src_len, max(1, src_len // 2), 1][:batch]
    if with_empty and batch > 1:
        lengths[-1] = 0
    return torch.tensor(lengths)


def _double(xs):
    return [x.detach().double().requires_grad_() for x in xs]


@pytest.mark.parametrize("mode", MODES, ids=lambda m: f"{'layer' if m[0] else 'joint'}-{m[1]}")
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("padding", ["none", "lengths", "with empty sentence"])
def test_float32_matches_float64_reference(shape, mode, padding):
    q, k, v = _inputs(shape, mode, torch.float32)
    lengths = None if padding == "none" else _lengths(shape[0], shape[2], padding == "with empty sentence")
    kwargs = dict(num_heads=shape[3], layer_specific=mode[0], key_lengths=lengths)
    result = multilayer_attention(q, k, v, return_probs=True, **kwargs)
    q64, k64, v64 = _double(q), _double(k), _double(v)
    ref_out, ref_probs = multilayer_attention_op_reference(q64, k64, v64, **kwargs)
    ref32_out, ref32_probs = multilayer_attention_op_reference(q, k, v, **kwargs)
    assert_close_to_double(result.out, ref32_out, ref_out, "out")
    assert_close_to_double(result.probs, ref32_probs, ref_probs.nan_to_num(0.0), "probs")
    grad = torch.randn_like(result.out)
    leaves, leaves64 = q + k + v, q64 + k64 + v64
    fused_grads = torch.autograd.grad(result.out, leaves, grad)
    ref32_grads = torch.autograd.grad(ref32_out, leaves, grad)
    ref_grads = torch.autograd.grad(ref_out, leaves64, grad.double())
    for index, (got, ref32, ref) in enumerate(zip(fused_grads, ref32_grads, ref_grads)):
        assert_close_to_double(got, ref32.nan_to_num(0.0), ref.nan_to_num(0.0), f"gradient of input {index}")


def test_sentence_without_keys_gives_zero_context_and_minus_infinite_lse():
    shape = (2, 3, 4, 2, 3, 3, 2)
    q, k, v = _inputs(shape, MODES[0], torch.float32)
    result = multilayer_attention(q, k, v, num_heads=2, key_lengths=torch.tensor([4, 0]), return_probs=True)
    assert torch.isneginf(result.lse[1]).all() and torch.isfinite(result.lse[0]).all()
    assert not result.out[1].any() and not result.probs[1].any()
    grads = torch.autograd.grad(result.out, q + k + v, torch.randn_like(result.out))
    assert all(not g[1].any() for g in grads)


@pytest.mark.parametrize("mode", MODES, ids=lambda m: f"{'layer' if m[0] else 'joint'}-{m[1]}")
def test_joint_weights_are_attention_on_concatenated_heads(mode):
    """The defining identity: joint weights = one softmax over sum_i q_i k_i^T (checked on the weights directly)."""
    q, k, v = _inputs((2, 4, 6, 2, 3, 3, 3), mode, torch.float64)
    result = multilayer_attention(q, k, v, num_heads=2, layer_specific=mode[0], scale=0.7, return_probs=True)
    split = lambda x: x.view(2, x.shape[1], 2, 3).transpose(1, 2)  # noqa: E731
    logits = [split(qi) @ split(ki).transpose(-1, -2) * 0.7 for qi, ki in zip(q, k)]
    expected = torch.cat([a.softmax(-1) for a in logits], 1) if mode[0] else sum(logits).softmax(-1)
    torch.testing.assert_close(result.probs, expected)


@pytest.mark.parametrize("mode", MODES, ids=lambda m: f"{'layer' if m[0] else 'joint'}-{m[1]}")
@pytest.mark.parametrize("padding", [False, True])
def test_gradcheck_float64(mode, padding):
    shape = (2, 3, 5, 2, 2, 3, 2)
    q, k, v = _inputs(shape, mode, torch.float64)
    lengths = _lengths(2, 5) if padding else None
    n_q, n_k = len(q), len(k)

    def run(*xs):
        return multilayer_attention(xs[:n_q], xs[n_q:n_q + n_k], xs[n_q + n_k:], num_heads=2,
                                    layer_specific=mode[0], key_lengths=lengths).out

    assert torch.autograd.gradcheck(run, tuple(q + k + v))


@pytest.mark.parametrize("mode", MODES, ids=lambda m: f"{'layer' if m[0] else 'joint'}-{m[1]}")
@pytest.mark.parametrize("return_probs", [False, True])
def test_opcheck(mode, return_probs):
    q, k, v = _inputs((2, 3, 5, 2, 4, 3, 2), mode, torch.float32)
    torch.library.opcheck(FORWARD, (q, k, v, _lengths(2, 5), 2, 0.5, mode[0], return_probs))
    torch.library.opcheck(FORWARD, (q, k, v, None, 2, 0.5, mode[0]))


def test_backward_opcheck():
    q, k, v = ([x.detach() for x in xs] for xs in _inputs((2, 3, 5, 2, 4, 3, 2), MODES[0], torch.float32))
    lengths = _lengths(2, 5)
    out, lse, _ = FORWARD(q, k, v, lengths, 2, 0.5, False)
    torch.library.opcheck(BACKWARD, (torch.randn_like(out), q, k, v, out, lse, None, lengths, 2, 0.5, False))
    out, lse, probs = FORWARD(q, k, v, lengths, 2, 0.5, False, True)
    torch.library.opcheck(BACKWARD, (torch.randn_like(out), q, k, v, out, lse, probs, lengths, 2, 0.5, False))


def test_meta_tensors_give_the_output_shapes():
    meta = lambda *s: torch.empty(*s, device="meta")  # noqa: E731
    out, lse, probs = FORWARD([meta(2, 3, 8)] * 3, [meta(2, 5, 8)] * 3, [meta(2, 5, 6)] * 3, None, 2, 0.5, True, True)
    assert out.shape == (2, 3, 18) and lse.shape == (2, 6, 3) and probs.shape == (2, 6, 3, 5)
    out, lse, _ = FORWARD([meta(2, 3, 8)] * 3, [meta(2, 5, 8)] * 3, [meta(2, 5, 6)], None, 2, 0.5, False)
    assert out.shape == (2, 3, 6) and lse.shape == (2, 2, 3)


def _good():
    q, k, v = _inputs((2, 3, 5, 2, 4, 3, 2), MODES[0], torch.float32)
    return dict(q=[x.detach() for x in q], k=[x.detach() for x in k], v=[x.detach() for x in v],
                key_lengths=_lengths(2, 5), num_heads=2, scale=0.5, layer_specific=False)


@pytest.mark.parametrize("change, message", [
    (lambda a: a.update(q=[]), "q must hold one tensor per encoder layer"),
    (lambda a: a.update(k=a["k"][:1]), "k must hold one tensor per layer like q"),
    (lambda a: a.update(v=a["v"] * 2), "v must hold one tensor per layer like q"),
    (lambda a: a.update(v=a["v"][:1], layer_specific=True), "v must hold one tensor per layer like q"),
    (lambda a: a.update(num_heads=0), "num_heads must be >= 1"),
    (lambda a: a.update(num_heads=3), "q\\[0\\]'s embed_dim \\(8\\) must be divisible by num_heads \\(3\\)"),
    (lambda a: a.update(scale=float("nan")), "scale must be positive and finite"),
    (lambda a: a["q"].__setitem__(1, torch.randn(2, 4, 8)), "q\\[1\\] must have shape \\[2, 3, 8\\]"),
    (lambda a: a["k"].__setitem__(1, torch.randn(2, 5, 6)), "k\\[1\\] must have shape \\[2, 5, 8\\]"),
    (lambda a: a["v"].__setitem__(1, torch.randn(2, 4, 6)), "v\\[1\\] must have shape \\[2, 5, 6\\]"),
    (lambda a: a["q"].__setitem__(0, torch.randn(2, 3)), "q\\[0\\] must have shape \\(batch, query_len"),
    (lambda a: a.update(key_lengths=torch.tensor([6, 1])), "key_lengths must lie in \\[0, key_len=5\\]"),
    (lambda a: a.update(key_lengths=torch.tensor([5])), "key_lengths must have shape \\(batch,\\)"),
])
def test_bad_calls_name_the_problem(change, message):
    args = _good()
    change(args)
    with pytest.raises((ValueError, RuntimeError), match=message):
        FORWARD(*args.values())


def test_wrong_dtype_is_a_type_error():
    args = _good()
    args["k"][1] = args["k"][1].double()
    with pytest.raises(TypeError, match="k\\[1\\] must have dtype Float like q\\[0\\]"):
        FORWARD(*args.values())
    args = _good()
    args.update(q=[x.half() for x in args["q"]], k=[x.half() for x in args["k"]], v=[x.half() for x in args["v"]])
    with pytest.raises(TypeError, match="on the CPU q must be float32 or float64"):
        FORWARD(*args.values())


def test_backward_checks_its_extra_tensors():
    args = _good()
    out, lse, _ = FORWARD(*args.values())
    extras = dict(grad_out=torch.randn_like(out), out=out, lse=lse)
    call = lambda e: BACKWARD(e["grad_out"], args["q"], args["k"], args["v"], e["out"], e["lse"],  # noqa: E731
                              e.get("probs"), args["key_lengths"], 2, 0.5, False)
    call(extras)
    with pytest.raises(ValueError, match="grad_out must have shape \\[2, 3, 12\\]"):
        call({**extras, "grad_out": out[:, :2]})
    with pytest.raises(ValueError, match="lse must have shape"):
        call({**extras, "lse": lse[:, :1]})
    with pytest.raises(TypeError, match="lse must have dtype"):
        call({**extras, "lse": lse.double()})
    with pytest.raises(ValueError, match="probs must have shape \\[2, 2, 3, 5\\]"):
        call({**extras, "probs": torch.rand(2, 2, 3, 4)})


@pytest.mark.parametrize("mode", MODES, ids=lambda m: f"{'layer' if m[0] else 'joint'}-{m[1]}")
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_backward_from_saved_weights_equals_recomputing_them(shape, mode):
    """Training on the CPU keeps the forward's weights for sources of up to 128 tokens (one key tile)."""
    q, k, v = ([x.detach() for x in xs] for xs in _inputs(shape, mode, torch.float64))
    lengths = _lengths(shape[0], shape[2], with_empty=True)
    options = (lengths, shape[3], 0.4, mode[0])
    out, lse, probs = FORWARD(q, k, v, *options, True)
    grad = torch.randn_like(out)
    saved = BACKWARD(grad, q, k, v, out, lse, probs, *options)
    recomputed = BACKWARD(grad, q, k, v, out, lse, None, *options)
    for got, want in zip(saved, recomputed):
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("mode", MODES, ids=lambda m: f"{'layer' if m[0] else 'joint'}-{m[1]}")
def test_a_one_key_sentence_gets_exactly_zero_q_and_k_gradients_in_float32(mode):
    """A sentence of one key puts each row's whole weight on it, so its q and k gradients are exactly 0, as plain
    PyTorch's are, when the backward recomputes the weights (sources over one key tile) and sums delta = dO . O as it
    sums dP = dO . v, across the fused layers (row_deltas in csrc/attention/cpu/attention_blocks.h)."""
    shape = (2, 40, 300, 2, 24, 24, 3)
    q, k, v = _inputs(shape, mode, torch.float32, seed=4)
    out = multilayer_attention(q, k, v, num_heads=shape[3], layer_specific=mode[0],
                               key_lengths=torch.tensor([300, 1])).out
    grads = torch.autograd.grad(out, (*q, *k), torch.randn_like(out))
    for grad in grads:
        assert torch.count_nonzero(grad[1]) == 0
    assert all(torch.count_nonzero(grad[0]) > 0 for grad in grads)
