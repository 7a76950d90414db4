"""Cases for exact instruction counts of the second hop (``mma_nmt::multihop_second_hop`` and the gate alone,
``mma_nmt::multihop_gate``) under callgrind (wall-clock on the shared machine is noise; instruction counts are not). Each case runs ``--calls`` times on one thread, after one
warm-up call:

- ``op-bwd``: the backward operator alone (``mma_nmt::multihop_gate_backward``) with a dense grad_out;
- ``gate``: forward + backward of the operator through autograd with the benchmark's ``out.sum()`` loss (a stride-0
  grad_out), projections as leaves — the "head gate op" row of ``benchmarks.bench_multihop``;
- ``second-hop``: forward + backward of the module's second hop (``multihop_second_hop``), the "second hop" row;
- ``second-hop-output`` / ``second-hop-output-ref``: forward + backward of the second hop with the output projection,
  fused (U_c folded into the output projection) / reference, the "second hop + output projection" row;
  ``second-hop-output-unfolded``: the same with the fused second hop and then the output projection, unfolded (the
  module before the fold).

Valgrind cannot run AVX-512, so cap both ATen and the extension at AVX2, and dump one profile per kernel call (or
read the whole run's inclusive counts)::

    MMA_NMT_CPU_ISA=avx2 ATEN_CPU_CAPABILITY=avx2 valgrind --tool=callgrind --callgrind-out-file=cg.out \\
        python -m benchmarks.callgrind_multihop --case gate --calls 4
    callgrind_annotate --inclusive=yes --threshold=100 cg.out | grep -E 'multihop_gate|autograd|copy_|zero'

The per-call count of a function is its inclusive count divided by ``calls + 1``.
"""

from __future__ import annotations

import argparse

import torch

from benchmarks.bench_multihop import SHAPES
from benchmarks.timing import timed_call
from mma_nmt.modules import MultiHopAttentionConfig, MultiHopSelfAttention
from mma_nmt.modules.heads import merge_heads, split_heads
from mma_nmt.ops import multihop_gate


def make_case(case: str, batch: int, length: int, embed: int, heads: int):
    """A no-argument function running one call of ``case`` at the given shape."""
    torch.manual_seed(0)
    dim = embed // heads
    projections = [torch.randn(batch, heads, length, dim, requires_grad=True) for _ in range(3)]  # (B, H, T, D)
    v_b = (torch.randn(dim) / dim**0.5).requires_grad_()
    if case == "op-bwd":
        with torch.no_grad():
            _, gate = multihop_gate(*projections, v_b)
        grad_out = torch.randn(batch, heads, length, dim)
        return lambda: torch.ops.mma_nmt.multihop_gate_backward(grad_out, None, *projections, v_b.detach(), gate)
    if case == "gate":
        return timed_call(lambda: multihop_gate(*projections, v_b).out, True, [*projections, v_b])
    module = MultiHopSelfAttention(MultiHopAttentionConfig(embed_dim=embed, num_heads=heads))
    q_projection = torch.randn(batch, length, embed, requires_grad=True)
    q = split_heads(q_projection, heads)  # (B, T, E) -> (B, H, T, D) view
    a = torch.randn(batch, heads, length, dim, requires_grad=True)
    if case == "second-hop-output-unfolded":
        return timed_call(lambda: module.out_proj(merge_heads(module.second_hop(q, a)[0])), True,
                          [q_projection, a, *module.parameters()])
    if case.startswith("second-hop-output"):
        module.config.implementation = "reference" if case.endswith("-ref") else "fused"
        return timed_call(lambda: module.second_hop_output(q, a)[0], True, [q_projection, a, *module.parameters()])
    return timed_call(lambda: module.second_hop(q, a)[0], True, [q_projection, a, *module.parameters()])


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", choices=("op-bwd", "gate", "second-hop", "second-hop-output",
                                                "second-hop-output-ref", "second-hop-output-unfolded"), default="op-bwd")
    parser.add_argument("--shape", choices=range(len(SHAPES)), type=int, default=0,
                        help="index into benchmarks.bench_multihop.SHAPES (0: IWSLT, 1: WMT base)")
    parser.add_argument("--calls", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    call = make_case(args.case, *list(SHAPES.values())[args.shape])
    for _ in range(1 + args.calls):
        call()


if __name__ == "__main__":
    main()
