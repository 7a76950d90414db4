"""Cases for exact instruction counts of the fused attention CPU kernels under callgrind (wall-clock on the shared
machine is noise; instruction counts are not). Each argument SPEC:T[:B] runs 2 x (forward + backward) at H = len(SPEC)
heads, head size 64, window 1, one thread. Valgrind cannot run AVX-512, so cap the build at AVX2 and dump one profile
per kernel call, then read each call's inclusive count:

    MMA_NMT_CPU_ISA=avx2 ATEN_CPU_CAPABILITY=avx2 valgrind --tool=callgrind \\
        '--dump-after=*isa_avx2::attention_forward(*' '--dump-after=*isa_avx2::attention_backward(*' \\
        --callgrind-out-file=cg.out python -m benchmarks.callgrind_attention GGGG:128 GLFB:128 LLLL:128
    for f in cg.out.*; do callgrind_annotate --inclusive=yes --threshold=100 $f | grep -E '^ *[0-9,]+ .*isa_avx2::attention_'; done

The dumps come in call order: forward, backward, forward, backward for each case.
"""

import sys

import torch

from mma_nmt.ops import fused_attention, parse_head_spec


def run_case(arg: str) -> None:
    parts = arg.split(":")
    spec, length = parts[0], int(parts[1])
    batch = int(parts[2]) if len(parts) > 2 else 1
    heads = len(spec)
    torch.manual_seed(0)
    q, k, v = (torch.randn(batch, heads, length, 64, requires_grad=True) for _ in range(3))  # (B, H, T, D)
    kinds = parse_head_spec(spec, heads)
    grad = torch.randn(batch, heads, length, 64)
    for _ in range(2):
        fused_attention(q, k, v, head_kinds=kinds, window=1).out.backward(grad)


if __name__ == "__main__":
    torch.set_num_threads(1)
    for case in sys.argv[1:]:
        run_case(case)
