"""Cases for exact instruction counts of the fused attention CPU kernels under callgrind (wall-clock on the shared
machine is noise; instruction counts are not). Each argument SPEC:T[:B[:D]][:pad][:fwd] runs 2 x (forward + backward)
at H = len(SPEC) heads, batch B (default 1), head size D (default 64), window 1, one thread; `pad` draws key lengths in
[T/2, T] as benchmarks/bench_attention.py does (first sentence full), `fwd` runs the forward only (no autograd).
Valgrind cannot run AVX-512, so cap the build at AVX2 and dump one profile per kernel call, then read each call's
inclusive count:

    MMA_NMT_CPU_ISA=avx2 ATEN_CPU_CAPABILITY=avx2 valgrind --tool=callgrind \\
        '--dump-after=*isa_avx2::attention_forward(*' '--dump-after=*isa_avx2::attention_backward(*' \\
        --callgrind-out-file=cg.out python -m benchmarks.callgrind_attention GGGG:128 GLFB:128 LLLL:128
    for f in cg.out.*; do callgrind_annotate --inclusive=yes --threshold=100 $f | grep -E '^ *[0-9,]+ .*isa_avx2::attention_'; done

The dumps come in call order: forward, backward, forward, backward for each case. For a per-function profile of the
kernels alone add `--collect-atstart=no '--toggle-collect=*isa_avx2::attention_*ward(*'` and read one dump with
`callgrind_annotate --inclusive=no`.
"""

import sys

import torch

from mma_nmt.ops import fused_attention, parse_head_spec


def run_case(arg: str) -> None:
    parts = arg.split(":")
    flags = {f for f in parts if f in ("pad", "fwd")}
    numbers = [int(x) for x in parts[1:] if x not in flags]
    spec, length = parts[0], numbers[0]
    batch = numbers[1] if len(numbers) > 1 else 1
    head_dim = numbers[2] if len(numbers) > 2 else 64
    heads = len(spec)
    backward = "fwd" not in flags
    torch.manual_seed(0)
    q, k, v = (torch.randn(batch, heads, length, head_dim, requires_grad=backward) for _ in range(3))  # (B, H, T, D)
    lengths = None
    if "pad" in flags:
        lengths = torch.randint(length // 2, length + 1, (batch,))
        lengths[0] = length
    kinds = parse_head_spec(spec, heads)
    grad = torch.randn(batch, heads, length, head_dim)
    for _ in range(2):
        with torch.set_grad_enabled(backward):
            out = fused_attention(q, k, v, head_kinds=kinds, key_lengths=lengths, window=1).out
        if backward:
            out.backward(grad)


if __name__ == "__main__":
    torch.set_num_threads(1)
    for case in sys.argv[1:]:
        run_case(case)
