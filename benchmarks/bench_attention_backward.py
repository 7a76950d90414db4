"""The CPU backward operator of ``mma_nmt::attention`` alone, at a few NMT sizes: one thread, thread CPU time per call.

    MALLOC_MMAP_THRESHOLD_=4000000000 MALLOC_TRIM_THRESHOLD_=4000000000 MALLOC_TOP_PAD_=500000000 \\
        python -m benchmarks.bench_attention_backward

Inputs are head views of (B, T, H, D) tensors, as the modules pass them; GLFB heads, no padding, window 1. The glibc
settings keep freed gradient buffers in the process: without them each call's fresh megabytes come back as page faults,
which thread CPU time counts, and samples of the same build differ by up to 2x. For a comparison of two builds, run
each twice, alternating (``benchmarks/results/attention_backward.cpu-1thread.md``).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

SIZES = ((16, 8, 32, 64), (4, 8, 128, 64), (1, 4, 300, 72))  # (B, H, T = S, D)


def time_backward(batch: int, heads: int, length: int, dim: int, rounds: int) -> list[float]:
    q, k, v = (torch.randn(batch, length, heads, dim).transpose(1, 2) for _ in range(3))  # (B, H, T, D) views
    kinds = [0, 1, 2, 3] * (heads // 4)
    lengths = torch.full((batch,), length)
    options = (kinds, 1, dim ** -0.5, 0, 0.0, 0)
    out, lse, _ = torch.ops.mma_nmt.attention(q, k, v, lengths, *options, False)
    grad_out = torch.randn_like(out)
    calls = max(1, 2_000_000 // (batch * heads * length * length))
    samples = []
    for _ in range(rounds):
        start = time.thread_time()
        for _ in range(calls):
            torch.ops.mma_nmt.attention_backward(grad_out, q, k, v, out, lse, lengths, *options)
        samples.append((time.thread_time() - start) / calls * 1e6)
    return samples


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args(argv)
    import mma_nmt  # noqa: F401  (registers the operators)

    torch.set_num_threads(1)
    print("| B, H, T = S, D | backward: min / median us |")
    print("|---|---|")
    for size in SIZES:
        samples = time_backward(*size, args.rounds)
        print(f"| {', '.join(map(str, size))} | {min(samples):.0f} / {statistics.median(samples):.0f} |")


if __name__ == "__main__":
    main()
