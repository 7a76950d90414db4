"""The CUDA kernels of mma_nmt::attention against the plain-PyTorch reference (SPEC section 1): outputs, weights and all
gradients. Part of the CUDA suite (``python -m pytest -m cuda``, skipped without a GPU: see conftest.py); without a GPU,
tests/cpp/emulated runs the same kernels under the HIP CPU emulator and .ci/cuda_build_check.sh proves they compile."""

from __future__ import annotations

import pytest
import torch

from attention_cases import assert_fused_matches_reference, make_qkv, padded_lengths
from mma_nmt.ops import fused_attention, parse_head_spec
from mma_nmt.training.determinism import deterministic_algorithms

pytestmark = pytest.mark.cuda


def cuda_qkv(batch, heads, query_len, key_len, head_dim, *, value_dim=None, dtype=torch.float32):
    """make_qkv's inputs, rounded to `dtype` and moved to the GPU."""
    cpu = make_qkv(batch, heads, query_len, key_len, head_dim, value_dim=value_dim, dtype=torch.float64,
                   requires_grad=False)
    return [t.to("cuda", dtype).requires_grad_() for t in cpu]


def check_cuda_against_reference(q, k, v, *, head_kinds, key_lengths=None, weights=True, **options):
    kinds = parse_head_spec(head_kinds, q.shape[1])
    lengths = None if key_lengths is None else key_lengths.to("cuda")
    assert_fused_matches_reference(q, k, v, head_kinds=kinds, key_lengths=lengths, weights=weights, **options)


@pytest.mark.parametrize("spec", ["G", "L", "F", "B", "C", "GLFB", "GLLL"])
@pytest.mark.parametrize("window", [0, 1, 2])
@pytest.mark.parametrize("dropout_p", [0.0, 0.3])
def test_cuda_every_head_kind_and_window_matches_reference(spec, window, dropout_p):
    q, k, v = cuda_qkv(3, 4, 23, 23, 16, dtype=torch.float64)
    check_cuda_against_reference(q, k, v, head_kinds=spec, key_lengths=padded_lengths(3, 23), window=window,
                                 dropout_p=dropout_p, seed=1234)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("length", [1, 7, 97])
@pytest.mark.parametrize("head_dim, value_dim", [(8, 8), (72, 40), (200, 256)])
def test_cuda_dtypes_and_shapes_match_reference(dtype, length, head_dim, value_dim):
    q, k, v = cuda_qkv(2, 4, length, length, head_dim, value_dim=value_dim, dtype=dtype)
    check_cuda_against_reference(q, k, v, head_kinds="GLFB", key_lengths=padded_lengths(2, length), window=2)


@pytest.mark.parametrize("kernels", ["handwritten", "rows"])
@pytest.mark.parametrize("dtype, head_dim, dropout_p", [
    (torch.float64, 16, 0.0), (torch.float64, 16, 0.3), (torch.float32, 128, 0.0), (torch.float16, 64, 0.0),
    (torch.bfloat16, 64, 0.0), (torch.bfloat16, 128, 0.0)])
@pytest.mark.parametrize("spec, length", [("GLFB", 37), ("GLLL", 70), ("CCLG", 11)])
def test_cuda_tiled_and_warp_kernels_without_weights_match_reference(monkeypatch, kernels, dtype, head_dim, dropout_p,
                                                                      spec, length):
    """Without weights, the hand-written attention runs its tiled kernels (attention_tile_kernels.cuh: several row and
    key tiles here, 32-row tiles, 24/16 for float32 heads of 128); MMA_NMT_CUDA_KERNELS=rows runs the warp-per-row
    kernels instead. Both against the reference, output and gradients."""
    monkeypatch.setenv("MMA_NMT_CUDA_KERNELS", kernels)
    q, k, v = cuda_qkv(3, 4, length, length, head_dim, dtype=dtype)
    check_cuda_against_reference(q, k, v, head_kinds=spec, key_lengths=padded_lengths(3, length), window=2,
                                 dropout_p=dropout_p, seed=7, weights=False)


def test_cuda_incremental_query_offset_and_cross_lengths_match_reference():
    q, k, v = cuda_qkv(2, 4, 1, 17, 8, value_dim=24, dtype=torch.float64)
    check_cuda_against_reference(q, k, v, head_kinds="CCLG", query_offset=16, window=2)


def test_cuda_fully_masked_rows_give_zero_output_and_gradient():
    q, k, v = cuda_qkv(1, 2, 4, 6, 8)
    result = fused_attention(q, k, v, head_kinds="GL", key_lengths=torch.tensor([0], device="cuda"))
    assert torch.equal(result.out, torch.zeros_like(result.out))
    assert torch.isneginf(result.lse).all()
    grads = torch.autograd.grad(result.out.sum(), (q, k, v))
    assert all(torch.equal(g, torch.zeros_like(g)) for g in grads)


def test_cuda_clamps_out_of_range_key_lengths():
    q, k, v = cuda_qkv(2, 1, 3, 5, 4, dtype=torch.float64)
    clamped = fused_attention(q, k, v, key_lengths=torch.tensor([5, 0], device="cuda")).out
    out_of_range = fused_attention(q, k, v, key_lengths=torch.tensor([9, -1], device="cuda")).out
    torch.testing.assert_close(out_of_range, clamped)


def test_cuda_rejects_head_size_above_256():
    q, k, v = cuda_qkv(1, 1, 2, 2, 257, value_dim=4)
    with pytest.raises(ValueError, match="head sizes up to 256"):
        fused_attention(q, k, v)


@pytest.mark.parametrize("spec, query_len, key_len, query_offset", [
    ("G", 23, 31, 0), ("L", 23, 23, 0), ("F", 23, 23, 0), ("B", 5, 17, 12), ("C", 23, 23, 0), ("C", 1, 17, 16)])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_cuda_flash_opt_in_takes_uniform_kinds_and_matches_reference(spec, query_len, key_len, query_offset, dtype,
                                                                     monkeypatch):
    """MMA_NMT_CUDA_KERNELS=flash (opt-in): a call of one head kind without key
    padding, where FA2's bottom-right window is our rule (S - T = query_offset), runs torch's FlashAttention-2 with the
    kind's window, forward and backward (docs/cuda.md, section 2)."""
    monkeypatch.setenv("MMA_NMT_CUDA_KERNELS", "flash")
    q, k, v = cuda_qkv(2, 4, query_len, key_len, 64, dtype=dtype)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        check_cuda_against_reference(q, k, v, head_kinds=spec, query_offset=query_offset, window=2, weights=False)
    names = {event.key for event in profile.key_averages()}
    assert {"aten::_flash_attention_forward", "aten::_flash_attention_backward"} <= names, sorted(names)


@pytest.mark.parametrize("spec", ["C", "B", "L"])
def test_cuda_flash_opt_in_gives_rows_before_their_first_key_lse_minus_inf(spec, monkeypatch):
    """Queries before their keys (S - T = query_offset < 0, no padding): FA2 writes lse +inf for the first rows, which
    see no key; the flash path returns ours, -inf there, and out 0, as the hand-written kernel does (its lse for every
    row within rounding)."""
    q, k, v = cuda_qkv(2, 4, 23, 17, 64, dtype=torch.bfloat16)
    kinds = parse_head_spec(spec, 4)
    results = {}
    for kernels in ("flash", "handwritten"):
        monkeypatch.setenv("MMA_NMT_CUDA_KERNELS", kernels)
        with torch.no_grad():
            results[kernels] = fused_attention(q, k, v, head_kinds=kinds, query_offset=-6, window=2)
    flash, handwritten = results["flash"], results["handwritten"]
    without_keys = torch.isneginf(handwritten.lse)
    assert without_keys[:, :, :4].all() and not without_keys[:, :, 8:].any()  # rows 0-5 (C, B), 0-3 (L, w 2)
    assert torch.equal(torch.isneginf(flash.lse), without_keys)
    torch.testing.assert_close(flash.lse[~without_keys], handwritten.lse[~without_keys], atol=2e-2, rtol=1e-2)
    assert (flash.out[without_keys] == 0).all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_cuda_flash_opt_in_takes_padded_cross_attention_and_matches_reference(dtype, monkeypatch):
    """Global heads with key padding (cross-attention): one variable-length FA2 call over the rows in place (each
    sentence its real queries against its real keys, then no query against its padding keys), an empty sentence and
    a length-1 one included; padding keys get a zero gradient (passed on an H200, 2026-11-28, with the real keys
    packed then)."""
    monkeypatch.setenv("MMA_NMT_CUDA_KERNELS", "flash")
    q, k, v = cuda_qkv(4, 4, 9, 23, 64, dtype=dtype)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        check_cuda_against_reference(q, k, v, head_kinds="G", key_lengths=torch.tensor([23, 1, 0, 11]), weights=False)
    names = {event.key for event in profile.key_averages()}
    assert {"aten::_flash_attention_forward", "aten::_flash_attention_backward"} <= names, sorted(names)


@pytest.mark.parametrize("spec", ["GLFB", "LLFF", "C"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_cuda_flash_opt_in_takes_padded_self_attention_per_kind(spec, dtype, monkeypatch):
    """Padded self-attention (T = S, said with self_attention=True): the heads split by kind, each group one FA2 call;
    non-global groups leave the padding query rows out of each sentence's real sequence (a sequence without keys), so
    they come out 0 with no gradient (SPEC's shared rules; docs/cuda.md, section 2). Real rows and every gradient as
    the reference, which gets the same grad_out, zero at padding rows."""
    from attention_cases import assert_close_to_double, reference_in_double
    from mma_nmt.reference import attention_reference

    monkeypatch.setenv("MMA_NMT_CUDA_KERNELS", "flash")
    batch, heads, length = 4, 4, 23
    q, k, v = cuda_qkv(batch, heads, length, length, 64, dtype=dtype)
    lengths = torch.tensor([23, 1, 0, 11], device="cuda")
    real = (torch.arange(length, device="cuda") < lengths[:, None])[:, None, :, None]  # (B, 1, T, 1)
    grad_out = torch.randn(batch, heads, length, 64, device="cuda", dtype=dtype) * real
    options = dict(head_kinds=parse_head_spec(spec, heads), key_lengths=lengths, window=2)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        result = fused_attention(q, k, v, **options, self_attention=True)
        grads = torch.autograd.grad(result.out, (q, k, v), grad_out)
    names = {event.key for event in profile.key_averages()}
    assert {"aten::_flash_attention_forward", "aten::_flash_attention_backward"} <= names, sorted(names)
    global_heads = torch.tensor([kind == "G" for kind in spec * (heads // len(spec))], device="cuda")
    left_out_rows = ~real & ~global_heads.view(1, heads, 1, 1)  # (B, H, T, 1): rows FA2 never saw
    assert torch.equal(result.out * left_out_rows, torch.zeros_like(result.out))
    assert torch.isneginf(result.lse[left_out_rows.squeeze(-1)]).all()
    ref_out, _ = attention_reference(q, k, v, **options)
    ref_grads = torch.autograd.grad(ref_out, (q, k, v), grad_out)
    double_out, double_inputs = reference_in_double(q, k, v, **options)
    double_grads = torch.autograd.grad(double_out, double_inputs, grad_out.double())
    keep = ~left_out_rows
    assert_close_to_double(result.out * keep, ref_out * keep, double_out * keep, "out")
    for name, got, low, high in zip("qkv", grads, ref_grads, double_grads):
        assert_close_to_double(got, low, high, f"grad_{name}")


@pytest.mark.parametrize("spec", ["GLFB", "C"])
def test_cuda_flash_opt_in_computes_every_row_of_a_cross_attention_of_equal_lengths(spec, monkeypatch):
    """Cross-attention with key padding and T = S by chance (no self_attention): the query rows past a sentence's key
    length are real target positions, which see keys in L, B and C heads. FA2 takes the global heads only; every row,
    and every gradient, as the reference (until 2026-12-02 the flash path took T = S for self-attention and returned
    0 in those rows)."""
    monkeypatch.setenv("MMA_NMT_CUDA_KERNELS", "flash")
    q, k, v = cuda_qkv(4, 4, 23, 23, 64, dtype=torch.bfloat16)
    check_cuda_against_reference(q, k, v, head_kinds=spec, key_lengths=torch.tensor([23, 1, 0, 11]), window=2,
                                 weights=False)


@pytest.mark.parametrize("kernels", [None, "handwritten", "rows", "flash", "composition"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("spec, padded", [("GLFB", True), ("G", False), ("G", True), ("C", False)])
def test_cuda_reads_head_views_in_place_and_returns_the_fake_kernels_layout(kernels, dtype, spec, padded, monkeypatch):
    """Every CUDA path (the hand-written kernels, FlashAttention per kind, the SDPA composition, which float32 takes
    from 256 x 256 pairs a sentence by default and at this size with MMA_NMT_CUDA_KERNELS=composition) takes head
    views of a joint (B, L, 3 H D) projection as they are and returns what the fake kernel promises, as the CPU does:
    out position-major, each gradient laid out like its input. A mismatch fails torch.compile at run time, or feeds the
    next kernel a wrong layout; the same values as from contiguous copies."""
    from mma_nmt.ops.fake_layout import position_major, projection_gradient_like

    if kernels is not None:
        monkeypatch.setenv("MMA_NMT_CUDA_KERNELS", kernels)
    torch.manual_seed(3)
    batch, length, heads, dim = 3, 70, 4, 64
    projection = torch.randn(batch, length, 3 * heads * dim, device="cuda", dtype=dtype)
    views = [x.view(batch, length, heads, dim).transpose(1, 2).requires_grad_()  # (B, H, L, D) head views
             for x in projection.split(heads * dim, -1)]
    copies = [x.detach().contiguous().requires_grad_() for x in views]
    options = dict(head_kinds=spec, window=2,
                   key_lengths=padded_lengths(batch, length).to("cuda") if padded else None)
    out, out_of_copies = (fused_attention(*qkv, **options).out for qkv in (views, copies))
    assert out.stride() == position_major(views[0], dim).stride()
    assert out_of_copies.stride() == out.stride()
    # float atomics in some backward kernels add in any order: bfloat16 results may differ by a rounding step
    close = dict(atol=2e-3, rtol=2e-2) if dtype == torch.bfloat16 else dict(atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(out, out_of_copies, **close)
    head_grad_out = torch.randn(batch, length, heads * dim, device="cuda", dtype=dtype).view(
        batch, length, heads, dim).transpose(1, 2)  # the merged heads' gradient, as autograd hands it on
    grads = torch.autograd.grad(out, views, head_grad_out)
    grads_of_copies = torch.autograd.grad(out_of_copies, copies, head_grad_out.contiguous())
    for name, x, grad, copy, grad_of_copy in zip("qkv", views, grads, copies, grads_of_copies):
        assert grad.stride() == projection_gradient_like(x).stride(), f"grad_{name}"
        assert grad_of_copy.stride() == projection_gradient_like(copy).stride(), f"grad_{name}"
        torch.testing.assert_close(grad, grad_of_copy, **close, msg=f"grad_{name}")


@pytest.mark.parametrize("spec, query_len", [("G", 9), ("GLFB", 23)])
def test_cuda_flash_never_reads_a_padding_row(spec, query_len, monkeypatch):
    """FA2 over a padded batch in place: a padding key belongs to a sequence without queries and a left-out padding
    query to one without keys, which FA2 exits before reading (flash_fwd_kernel.h, flash_bwd_kernel.h). NaN behind
    them changes no result: output, lse and every gradient equal those of the same call without NaN (bit for bit: at
    these sizes each sequence is one key block, so FA2's backward adds each query's gradient once)."""
    monkeypatch.setenv("MMA_NMT_CUDA_KERNELS", "flash")
    batch, heads, key_len = 4, 4, 23
    q, k, v = cuda_qkv(batch, heads, query_len, key_len, 64, dtype=torch.bfloat16)
    lengths = torch.tensor([23, 1, 0, 11], device="cuda")
    padding_keys = (torch.arange(key_len, device="cuda") >= lengths[:, None])[:, None, :, None]  # (B, 1, S, 1)
    kinds = parse_head_spec(spec, heads)
    options = dict(head_kinds=kinds, key_lengths=lengths, window=2)
    grad_out = torch.randn(batch, heads, query_len, 64, device="cuda", dtype=torch.bfloat16)
    if query_len == key_len:  # the non-global heads leave their padding query rows out: NaN there too
        left_out = padding_keys & torch.tensor([kind != 0 for kind in kinds], device="cuda").view(1, heads, 1, 1)
    else:
        left_out = torch.zeros(batch, heads, query_len, 1, dtype=torch.bool, device="cuda")
    grad_out = grad_out.masked_fill(left_out, 0.0)
    options["self_attention"] = query_len == key_len
    clean = fused_attention(q, k, v, **options)
    clean_grads = torch.autograd.grad(clean.out, (q, k, v), grad_out)
    nan = float("nan")
    dirty_q = q.detach().masked_fill(left_out, nan).requires_grad_()
    dirty_k = k.detach().masked_fill(padding_keys, nan).requires_grad_()
    dirty_v = v.detach().masked_fill(padding_keys, nan).requires_grad_()
    dirty = fused_attention(dirty_q, dirty_k, dirty_v, **options)
    dirty_grads = torch.autograd.grad(dirty.out, (dirty_q, dirty_k, dirty_v), grad_out.masked_fill(left_out, nan))
    assert torch.equal(dirty.out, clean.out)
    assert torch.equal(dirty.lse, clean.lse)
    for name, got, want in zip("qkv", dirty_grads, clean_grads):
        assert torch.equal(got, want), f"grad_{name}"


@pytest.fixture
def deterministic():
    """torch.use_deterministic_algorithms(True) for one test, as train.deterministic sets it; restored after it."""
    with deterministic_algorithms(True):
        yield


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_backward_is_bitwise_repeatable_under_deterministic_algorithms(dtype, deterministic):
    """At NMT sizes the default backward is the warp-per-row kernel, which adds dK and dV atomically; under
    torch.use_deterministic_algorithms(True) the tiled backward takes the call (attention_tile_kernels.cuh,
    tile_warps_for), so the same call gives the same gradients bit for bit (the tests above check its values)."""
    q, k, v = cuda_qkv(16, 8, 64, 64, 64, dtype=dtype)
    lengths = padded_lengths(16, 64).to("cuda")
    grad_out = torch.randn(16, 8, 64, 64, device="cuda", dtype=dtype)
    options = dict(head_kinds=parse_head_spec("GLFB", 8), key_lengths=lengths, window=2)
    first = torch.autograd.grad(fused_attention(q, k, v, **options).out, (q, k, v), grad_out)
    for _ in range(3):
        again = torch.autograd.grad(fused_attention(q, k, v, **options).out, (q, k, v), grad_out)
        for name, got, want in zip("qkv", again, first):
            assert torch.equal(got, want), f"grad_{name}"


def test_cuda_warp_backward_refuses_deterministic_algorithms(deterministic, monkeypatch):
    """Forced onto the warp-per-row backward (or with heads past the tiles' 128), a call under deterministic
    algorithms is refused with torch's own message, as torch's non-deterministic kernels are."""
    monkeypatch.setenv("MMA_NMT_CUDA_KERNELS", "rows")
    q, k, v = cuda_qkv(2, 4, 9, 9, 16)
    out = fused_attention(q, k, v, head_kinds=parse_head_spec("GLFB", 4)).out
    with pytest.raises(RuntimeError, match="mma_nmt::attention_backward.*does not have a deterministic implementation"):
        out.sum().backward()
