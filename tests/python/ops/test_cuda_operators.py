"""Every operator on CUDA against the same operator on the CPU (whose kernels the rest of the suite verifies against the
SPEC references to 1e-14), forward and backward, in float64, float32, float16 and bfloat16. Part of the CUDA suite:

    MMA_NMT_REQUIRE_CUDA=1 python -m pytest -m cuda      # on a machine with a GPU (or: make test-cuda)

Without a GPU these tests skip (and with MMA_NMT_REQUIRE_CUDA=1 they fail instead, see conftest.py). The CUDA kernels
themselves also run without a GPU, under the HIP CPU emulator, in the ctest suite (tests/cpp/emulated)."""

from __future__ import annotations

import pytest
import torch

from cuda_cases import CASES, inputs_on, output_and_grads

# Low-precision rule (flash-attention's): the CUDA operator's error against the float64 CPU operator is at most twice
# that of the plain-PyTorch reference run on the GPU at the same precision, plus a floor for errors tiny on both sides.
FLOORS = {torch.float32: 1e-5, torch.float16: 1e-3, torch.bfloat16: 1e-2}


def _inputs_and_grad_out(case, *, seed):
    """The case's inputs and an output gradient of the fused output's shape, in float64, from one generator."""
    gen = torch.Generator().manual_seed(seed)
    inputs = case.make_inputs(gen)
    probe = case.fused(**inputs_on(inputs, (), "cpu", torch.float64))
    return inputs, torch.randn(probe.shape, generator=gen, dtype=torch.float64)


def _cpu_float64(case, inputs, grad_out):
    return output_and_grads(case.fused, inputs_on(inputs, case.differentiable, "cpu", torch.float64),
                            case.differentiable, grad_out)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_case_fused_and_reference_agree_on_cpu(case):
    """Not a CUDA test: the cases themselves (inputs, calls, gradients) are right, so a GPU failure is the kernel's."""
    inputs, grad_out = _inputs_and_grad_out(case, seed=2)
    fused = _cpu_float64(case, inputs, grad_out)
    reference = output_and_grads(case.reference, inputs_on(inputs, case.differentiable, "cpu", torch.float64),
                                 case.differentiable, grad_out)
    assert len(fused) == len(reference) > 1
    for index, (f, r) in enumerate(zip(fused, reference)):
        torch.testing.assert_close(f, r, rtol=1e-9, atol=1e-9, msg=lambda m: f"{case.name} #{index}: {m}")


@pytest.mark.cuda
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_cuda_operator_matches_cpu_operator_in_float64(case):
    inputs, grad_out = _inputs_and_grad_out(case, seed=0)
    expected = _cpu_float64(case, inputs, grad_out)
    got = output_and_grads(case.fused, inputs_on(inputs, case.differentiable, "cuda", torch.float64),
                           case.differentiable, grad_out)
    for index, (g, e) in enumerate(zip(got, expected)):
        torch.testing.assert_close(g.cpu(), e, rtol=1e-10, atol=1e-10, msg=lambda m: f"{case.name} #{index}: {m}")


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_cuda_operator_low_precision_error_within_twice_plain_pytorch(case, dtype):
    inputs, grad_out = _inputs_and_grad_out(case, seed=1)
    exact = _cpu_float64(case, inputs, grad_out)
    on_gpu = inputs_on(inputs, case.differentiable, "cuda", dtype)
    kernel = output_and_grads(case.fused, on_gpu, case.differentiable, grad_out)
    plain = output_and_grads(case.reference, inputs_on(inputs, case.differentiable, "cuda", dtype),
                             case.differentiable, grad_out)
    for index, (k, p, e) in enumerate(zip(kernel, plain, exact)):
        kernel_error = (k.double().cpu() - e).abs().max().item()
        torch_error = (p.double().cpu() - e).abs().max().item()
        assert kernel_error <= 2 * torch_error + FLOORS[dtype], (
            f"{case.name} {dtype} #{index}: kernel error {kernel_error:.3g} vs plain PyTorch {torch_error:.3g}")


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("with_u_c", [True, False])
def test_cuda_multihop_operators_take_head_views_and_return_the_fake_kernels_layout(dtype, with_u_c):
    """The multi-hop module hands the second hop head views of its query projection and the first hop's position-major
    output: the CUDA operators (the gate kernel through its strides, the second hop's GEMMs on the rows as they lie)
    return out and hidden position-major and gradients laid out like their inputs, what the fake kernels promise, with
    the values of contiguous copies."""
    from mma_nmt.ops.fake_layout import position_major, projection_gradient_like
    from mma_nmt.ops.second_hop import multihop_second_hop

    torch.manual_seed(4)
    batch, heads, steps, dim, hop = 3, 4, 9, 16, 24

    def head_view(width):  # (B, H, T, width) view of a (B, T, H width) tensor
        return torch.randn(batch, steps, heads * width, device="cuda", dtype=dtype).view(
            batch, steps, heads, width).transpose(1, 2).requires_grad_()

    q, a = head_view(dim), head_view(dim)
    w_b = torch.randn(hop, dim, device="cuda", dtype=dtype, requires_grad=True)
    u_b = torch.randn(heads, hop, dim, device="cuda", dtype=dtype, requires_grad=True)
    u_c = torch.randn(heads, dim, dim, device="cuda", dtype=dtype, requires_grad=True) if with_u_c else None
    v_b = torch.randn(hop, device="cuda", dtype=dtype, requires_grad=True)
    copies = [x.detach().contiguous().requires_grad_() for x in (q, a)]
    out = multihop_second_hop(q, a, w_b, u_b, u_c, v_b).out
    out_of_copies = multihop_second_hop(*copies, w_b, u_b, u_c, v_b).out
    assert out.stride() == position_major(q, out.shape[3]).stride()
    close = dict(atol=2e-2, rtol=2e-2) if dtype == torch.bfloat16 else dict(atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(out, out_of_copies, **close)
    grad_out = torch.randn(batch, steps, heads * out.shape[3], device="cuda", dtype=dtype).view(
        batch, steps, heads, out.shape[3]).transpose(1, 2)
    grads = torch.autograd.grad(out, (q, a), grad_out)
    grads_of_copies = torch.autograd.grad(out_of_copies, copies, grad_out.contiguous())
    for name, x, grad, grad_of_copy in zip("qa", (q, a), grads, grads_of_copies):
        assert grad.stride() == projection_gradient_like(x).stride(), f"grad_{name} {grad.stride()}"
        torch.testing.assert_close(grad, grad_of_copy, **close, msg=f"grad_{name}")


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("key_len", [9, 600])  # the block-per-head kernels, and keys past their 48 KiB of staging
def test_cuda_gmm_takes_head_views_and_returns_the_fake_kernels_layout(dtype, key_len):
    """The GMM module hands the operator head views of its query projection and of one fused key/value projection: on
    CUDA (by default the block-per-head kernels for 9 keys, and for 600 (D 16: 61-99 KiB of shared memory) the
    composition, mma_nmt.attention and the mixture kernels, in both dtypes (bfloat16 took the one-warp-per-row
    kernels until 2026-12-03); MMA_NMT_CUDA_KERNELS=handwritten runs the block kernels with the device's opt-in shared
    memory there, =rows the one-warp-per-row kernels, =composition the composition at both sizes) out comes back
    position-major and the gradients of q, k and v laid out like them, what the fake kernel promises, with the values
    of contiguous copies. Until 2026-12-03 the long case had 200 keys, which fit the block kernels' 48 KiB."""
    from mma_nmt.ops import gmm_attention
    from mma_nmt.ops.fake_layout import position_major, projection_gradient_like

    torch.manual_seed(6)
    batch, heads, steps, dim, components = 3, 4, 7, 16, 3
    query = torch.randn(batch, steps, heads * dim, device="cuda", dtype=dtype)
    memory = torch.randn(batch, key_len, 2 * heads * dim, device="cuda", dtype=dtype)
    q = query.view(batch, steps, heads, dim).transpose(1, 2).requires_grad_()  # (B, H, T, D) views
    k = memory[..., :heads * dim].view(batch, key_len, heads, dim).transpose(1, 2).detach().requires_grad_()
    v = memory[..., heads * dim:].view(batch, key_len, heads, dim).transpose(1, 2).detach().requires_grad_()
    lengths = torch.tensor([key_len, 1, key_len - 3], device="cuda")
    mixture = dict(omega=torch.softmax(torch.randn(batch, heads, steps, components, device="cuda"), -1).to(dtype),
                   mu=(torch.rand(batch, heads, steps, components, device="cuda") * key_len).to(dtype),
                   sigma=(torch.rand(batch, heads, steps, components, device="cuda") * 3 + 0.5).to(dtype),
                   gate=torch.rand(batch, heads, steps, device="cuda").to(dtype), key_lengths=lengths)
    copies = [x.detach().contiguous().requires_grad_() for x in (q, k, v)]
    out = gmm_attention(q, k, v, **mixture).out
    out_of_copies = gmm_attention(*copies, **mixture).out
    assert out.stride() == position_major(q, out.shape[3]).stride()
    close = dict(atol=2e-2, rtol=2e-2) if dtype == torch.bfloat16 else dict(atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(out, out_of_copies, **close)
    grad_out = torch.randn(batch, steps, heads * dim, device="cuda", dtype=dtype).view(
        batch, steps, heads, dim).transpose(1, 2)
    grads = torch.autograd.grad(out, (q, k, v), grad_out)
    grads_of_copies = torch.autograd.grad(out_of_copies, copies, grad_out.contiguous())
    for name, x, grad, grad_of_copy in zip("qkv", (q, k, v), grads, grads_of_copies):
        assert grad.stride() == projection_gradient_like(x).stride(), f"grad_{name} {grad.stride()}"
        torch.testing.assert_close(grad, grad_of_copy, **close, msg=f"grad_{name}")
