"""Second hop of multi-hop attention (SPEC section 4): the fused operators against the plain-PyTorch formula.

Rows: the head-gate operator alone (``multihop_gate``, given the projections), the whole second hop (projections +
gate: ``multihop_second_hop``, which runs the projections as products in cache), the second hop with the output
projection (what the module runs after the first hop) and the whole multi-hop self-attention module, forward and
forward+backward, on the paper's shapes (E = 512, H = 8, D = Db = 64, batches of about 4k tokens). Every figure is a
ratio of two timings interleaved in the same run. Goal (issue 8): the second hop at least 1.5x faster than the
reference.

The fused module folds U_c into the output projection (``MultiHopSelfAttention.second_hop_output``): the operator
returns ``beta_h a_h`` and one GEMM with ``[W_O,1 U_c_1 ... W_O,H U_c_H]`` replaces the U_c products and the output
projection. That saving is only visible in a boundary that contains the output projection on both sides, hence the
row "second hop + output projection"; its reference is SPEC's formula (the reference second hop, then ``out_proj``).
The row "second hop (projections + gate)" times the unfolded ``second_hop`` on both sides.

    python -m benchmarks.bench_multihop [--quick] [--threads N]
"""

from __future__ import annotations

import argparse
import copy

import torch

from benchmarks.timing import markdown_table, speedup_rows
from mma_nmt.modules import MultiHopAttentionConfig, MultiHopSelfAttention
from mma_nmt.modules.heads import split_heads
from mma_nmt.ops import multihop_gate
from mma_nmt.reference import head_gate_reference

SHAPES = {  # name: (sentences, tokens each, E, H)
    "IWSLT (E=256, H=4), 64x64 tokens": (64, 64, 256, 4),
    "WMT base (E=512, H=8), 128x32 tokens": (128, 32, 512, 8),
}


def rows_for(name, batch, length, embed, heads, repeat, *, whats=None, **timing):
    """Speed-up rows of one shape; ``whats``: the subset of rows to time (default all); ``timing``: see
    ``timing.time_interleaved``."""
    torch.manual_seed(0)
    fused = MultiHopSelfAttention(MultiHopAttentionConfig(embed_dim=embed, num_heads=heads))
    reference = copy.deepcopy(fused)
    reference.config.implementation = "reference"
    dim = embed // heads
    # q as the module hands it over: the head view of the (B, T, E) query projection; a as the first hop returns it
    q_projection = torch.randn(batch, length, embed, requires_grad=True)
    q = split_heads(q_projection, heads)  # (B, T, E) -> (B, H, T, D) view
    a = torch.randn(batch, heads, length, dim, requires_grad=True)
    projections = [torch.randn(batch, heads, length, dim, requires_grad=True) for _ in range(3)]
    v_b = fused.v_b
    x = torch.randn(batch, length, embed, requires_grad=True)
    leaves = [q_projection, a, x, *projections, *fused.parameters(), *reference.parameters()]
    pairs = {
        "head gate op": (lambda: multihop_gate(*projections, v_b).out,
                         lambda: head_gate_reference(*projections, v_b)[0]),
        "second hop (projections + gate)": (lambda: fused.second_hop(q, a)[0], lambda: reference.second_hop(q, a)[0]),
        "second hop + output projection": (lambda: fused.second_hop_output(q, a)[0],
                                           lambda: reference.second_hop_output(q, a)[0]),
        "multi-hop self-attention module": (lambda: fused(x)[0], lambda: reference(x)[0]),
    }
    pairs = {what: pair for what, pair in pairs.items() if whats is None or what in whats}
    return speedup_rows(name, pairs, leaves, repeat=repeat, **timing)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one shape, fewer repeats (a smoke test)")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's choice)")
    parser.add_argument("--what", action="append", default=None,
                        help="time only this row (repeatable; default all), e.g. 'second hop + output projection'")
    parser.add_argument("--shape", type=int, default=None, help="time only this index into SHAPES (0: IWSLT, 1: WMT)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    shapes = list(SHAPES.items())[1:] if args.quick else list(SHAPES.items())
    if args.shape is not None:
        shapes = [list(SHAPES.items())[args.shape]]
    rows = []
    for name, shape in shapes:
        rows += rows_for(name, *shape, repeat=3 if args.quick else 7, whats=args.what)
    print(f"torch threads: {torch.get_num_threads()}\n")
    print(markdown_table(["shape", "what", "pass", "reference ms", "fused ms", "speed-up"], rows))


if __name__ == "__main__":
    main()
