"""Fused mixed-head attention vs the plain-PyTorch reference and vs scaled_dot_product_attention given the equivalent
boolean mask, forward and forward+backward, float32. Every number printed is a ratio of timings taken in one run.

    python benchmarks/bench_attention.py            # batch 32, head size 64, 4 and 8 heads, lengths 32..512
    python benchmarks/bench_attention.py --quick    # a smaller sweep
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.timing import markdown_table, time_interleaved  # noqa: E402
from mma_nmt.ops import fused_attention, parse_head_spec  # noqa: E402
from mma_nmt.reference import attention_reference, visibility_mask  # noqa: E402

SPECS = {"global": "G", "GLFB": "GLFB", "local": "L"}


def make_case(batch, heads, length, head_dim, spec, window, requires_grad):
    q, k, v = (torch.randn(batch, heads, length, head_dim, requires_grad=requires_grad) for _ in range(3))
    lengths = torch.randint(length // 2, length + 1, (batch,))
    lengths[0] = length
    kinds = parse_head_spec(SPECS[spec], heads)
    mask = visibility_mask(kinds, length, length, window=window, key_lengths=lengths, batch=batch)  # (B, H, T, S)
    return q, k, v, lengths, kinds, mask


def runners(case, window, backward):
    q, k, v, lengths, kinds, mask = case
    grad = torch.randn_like(q)

    def finish(out):
        if backward:
            out.backward(grad)

    def fused():
        finish(fused_attention(q, k, v, head_kinds=kinds, key_lengths=lengths, window=window).out)

    def sdpa():
        finish(F.scaled_dot_product_attention(q, k, v, attn_mask=mask))

    def reference():
        finish(attention_reference(q, k, v, head_kinds=kinds, key_lengths=lengths, window=window)[0])

    return fused, sdpa, reference


def run(args) -> list[dict]:
    rows = []
    torch.manual_seed(0)
    for heads in args.heads:
        for length in args.lengths:
            for spec in SPECS:
                for backward in (False, True):
                    case = make_case(args.batch, heads, length, args.head_dim, spec, args.window, backward)
                    with torch.set_grad_enabled(backward):
                        fused_s, sdpa_s, ref_s = time_interleaved(runners(case, args.window, backward),
                                                                  repeat=args.repeat)
                    rows.append(dict(heads=heads, length=length, spec=spec, pass_="fwd+bwd" if backward else "fwd",
                                     fused_ms=fused_s * 1e3, sdpa_over_fused=sdpa_s / fused_s,
                                     reference_over_fused=ref_s / fused_s))
                    print(f"  H={heads} T={length} {spec} {rows[-1]['pass_']}: fused {fused_s * 1e3:.2f} ms, "
                          f"SDPA/fused {sdpa_s / fused_s:.2f}x, reference/fused {ref_s / fused_s:.2f}x", flush=True)
    return rows


def main(argv=None) -> str:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--heads", type=int, nargs="+", default=[4, 8])
    parser.add_argument("--lengths", type=int, nargs="+", default=[32, 64, 128, 256, 512])
    parser.add_argument("--window", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="batch 8, 4 heads, lengths 32 128 512")
    parser.add_argument("--json", type=Path, help="also write the rows as JSON here")
    args = parser.parse_args(argv)
    if args.quick:
        args.batch, args.heads, args.lengths, args.repeat = 8, [4], [32, 128, 512], 3
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, batch {args.batch}, head size {args.head_dim}")
    rows = run(args)
    table = markdown_table(
        ["heads", "length", "spec", "pass", "fused ms", "SDPA+mask / fused", "reference / fused"],
        [[r["heads"], r["length"], r["spec"], r["pass_"], r["fused_ms"], r["sdpa_over_fused"],
          r["reference_over_fused"]] for r in rows])
    print(table)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return table


if __name__ == "__main__":
    main()
