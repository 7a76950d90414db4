"""How accurate is torch's memory-efficient SDPA backward in float32, by head size? (At head size 256, zero-padded from
200, the composition's grad_k missed the CUDA suite's float32 rule, 1.55e-5 against 1.7e-6 for plain PyTorch:
benchmarks/results/2026-11-26.cuda-quick.notes.md; this probe's results on the GPU and on the CPU:
benchmarks/results/2026-11-28.cuda-suite.notes.md.) For each head size, q, k, v of shape (B, H, T, E) with a padding
mask as an additive bias, as the composition calls it: the largest error of each gradient against a float64 reference,
for the memory-efficient kernel and for plain PyTorch (the math backend) in float32, with the second sentence 49 keys
long or 1 (the suite's case has a one-key sentence). Prints one markdown table. Without a GPU it measures torch's CPU
flash kernel instead, the fused kernel the composition calls on the CPU.

    python3 scripts/gpu_probe_efficient_backward.py
"""

from __future__ import annotations

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.functional import scaled_dot_product_attention as sdpa

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
FUSED = SDPBackend.EFFICIENT_ATTENTION if DEVICE == "cuda" else SDPBackend.FLASH_ATTENTION


def gradients(q, k, v, bias, grad_out, scale, backend):
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    with sdpa_kernel(backend):
        out = sdpa(q, k, v, attn_mask=bias, scale=scale)
    return torch.autograd.grad(out, (q, k, v), grad_out)


def probe(head_dim: int, padded_to: int, short: int, *, batch=2, heads=4, length=97, seed=0) -> dict:
    generator = torch.Generator(device=DEVICE).manual_seed(seed)
    shape = (batch, heads, length, head_dim)
    q, k = (torch.randn(shape, device=DEVICE, dtype=torch.float64, generator=generator) for _ in range(2))
    v = torch.randn((batch, heads, length, 256 if padded_to else head_dim), device=DEVICE, dtype=torch.float64,
                    generator=generator)
    grad_out = torch.randn_like(v)
    lengths = torch.tensor([length, short], device=DEVICE)
    keep = torch.arange(length, device=DEVICE)[None, :] < lengths[:, None]  # (B, S)
    bias = torch.zeros(batch, 1, length, length, device=DEVICE, dtype=torch.float64)
    bias = bias.masked_fill(~keep[:, None, None, :], float("-inf")).expand(batch, heads, length, length)
    scale = head_dim ** -0.5
    reference = gradients(q, k, v, bias, grad_out, scale, SDPBackend.MATH)
    q32, k32, v32, bias32, grad32 = (t.float() for t in (q, k, v, bias, grad_out))
    math32 = gradients(q32, k32, v32, bias32, grad32, scale, SDPBackend.MATH)
    if padded_to:  # the composition's zero padding of q and k to a head size the kernel supports
        pad = (0, padded_to - head_dim)
        q32, k32 = (torch.nn.functional.pad(t, pad) for t in (q32, k32))
    fused = gradients(q32, k32, v32, bias32.contiguous(), grad32, scale, FUSED)
    fused = [g[..., :head_dim] if i < 2 else g for i, g in enumerate(fused)]
    return {name: [(g.double() - r).abs().max().item() for g, r in zip(grads, reference)]
            for name, grads in ((FUSED.name.lower(), fused), ("math", math32))}


def main() -> None:
    name = torch.cuda.get_device_name() if DEVICE == "cuda" else "CPU"
    print(f"{name}, torch {torch.__version__}; B 2, H 4, T 97; the second sentence's keys: "
          "49, or 1 (a one-key row: its softmax is constant, so its key's true gradient is 0, which plain PyTorch "
          "gives exactly and a fused backward only up to the rounding of dP - D summed over the 97 queries)")
    print("| head size | second sentence | kernel | grad_q | grad_k | grad_v |\n|---|---|---|---|---|---|")
    for short in (49, 1):
        for head_dim, padded_to in ((64, 0), (128, 0), (192, 0), (200, 256), (256, 0)):
            name = f"{head_dim} (padded to {padded_to})" if padded_to else str(head_dim)
            for kernel, errors in probe(head_dim, padded_to, short).items():
                print(f"| {name} | {short} keys | {kernel} | " + " | ".join(f"{e:.2e}" for e in errors) + " |")


if __name__ == "__main__":
    main()
