"""Fused mixed-head attention vs the plain-PyTorch reference, vs ``scaled_dot_product_attention`` given the equivalent
boolean mask and (forward only, where it compiles) vs FlexAttention through ``torch.compile``; forward and
forward+backward, float32. Every number printed is a ratio of timings interleaved in one run.

    python -m benchmarks.bench_attention            # batch 32, head size 64, 4 and 8 heads, lengths 32..512
    python -m benchmarks.bench_attention --quick    # a smaller sweep
    python -m benchmarks.bench_attention --flex     # add FlexAttention (compiles per shape: minutes when cold)
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
import torch.nn.functional as F

from benchmarks.timing import markdown_table, pass_name, time_interleaved
from mma_nmt.ops import fused_attention, parse_head_spec
from mma_nmt.reference import attention_reference, visibility_mask

SPECS = {"global": "G", "GLFB": "GLFB", "local": "L"}
CONTENDERS = ("fused", "sdpa", "flex", "reference")


def make_case(batch, heads, length, head_dim, spec, window, requires_grad):
    """(q, k, v (B, H, T, D), key lengths (B,) in [T/2, T], head kinds, visibility mask (B, H, T, S))."""
    q, k, v = (torch.randn(batch, heads, length, head_dim, requires_grad=requires_grad) for _ in range(3))
    lengths = torch.randint(length // 2, length + 1, (batch,))
    lengths[0] = length
    kinds = parse_head_spec(SPECS[spec], heads)
    mask = visibility_mask(kinds, length, length, window=window, key_lengths=lengths, batch=batch)  # (B, H, T, S)
    return q, k, v, lengths, kinds, mask


def runners(case, window, backward, contenders=CONTENDERS) -> list:
    """One call per contender (in the order of ``contenders``); with ``backward`` each call also runs the backward
    pass. ``flex`` is forward only (FlexAttention has no CPU backward)."""
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

    def flex():
        from benchmarks.flex import flex_forward
        return flex_forward(q, k, v, head_kinds=kinds, window=window, key_lengths=lengths)

    made = {"fused": fused, "sdpa": sdpa, "reference": reference}
    return [flex() if name == "flex" else made[name] for name in contenders]


def compare(*, batch, heads, length, spec, backward, head_dim=64, window=1, contenders=CONTENDERS, repeat=5,
            **timing) -> dict[str, float]:
    """Median seconds per call of each contender at one shape, interleaved (see ``timing.time_interleaved``)."""
    case = make_case(batch, heads, length, head_dim, spec, window, backward)
    with torch.set_grad_enabled(backward):
        seconds = time_interleaved(runners(case, window, backward, contenders), repeat=repeat, **timing)
    return dict(zip(contenders, seconds))


def run(args) -> list[dict]:
    rows = []
    torch.manual_seed(0)
    for heads in args.heads:
        for length in args.lengths:
            for spec in SPECS:
                for backward in (False, True):
                    contenders = [c for c in CONTENDERS if c != "flex" or (args.flex and not backward)]
                    t = compare(batch=args.batch, heads=heads, length=length, spec=spec, backward=backward,
                                head_dim=args.head_dim, window=args.window, contenders=contenders,
                                repeat=args.repeat)
                    rows.append(dict(heads=heads, length=length, spec=spec, pass_=pass_name(backward),
                                     fused_ms=t["fused"] * 1e3, sdpa_over_fused=t["sdpa"] / t["fused"],
                                     flex_over_fused=t["flex"] / t["fused"] if "flex" in t else None,
                                     reference_over_fused=t["reference"] / t["fused"]))
                    print(f"  H={heads} T={length} {spec} {rows[-1]['pass_']}: fused {t['fused'] * 1e3:.2f} ms, "
                          f"SDPA/fused {rows[-1]['sdpa_over_fused']:.2f}x, "
                          f"reference/fused {rows[-1]['reference_over_fused']:.2f}x", flush=True)
    return rows


def main(argv=None) -> str:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--heads", type=int, nargs="+", default=[4, 8])
    parser.add_argument("--lengths", type=int, nargs="+", default=[32, 64, 128, 256, 512])
    parser.add_argument("--window", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--flex", action="store_true", help="also FlexAttention via torch.compile (forward only)")
    parser.add_argument("--quick", action="store_true", help="batch 8, 4 heads, lengths 32 128 512")
    parser.add_argument("--json", type=Path, help="also write the rows as JSON here")
    args = parser.parse_args(argv)
    if args.quick:
        args.batch, args.heads, args.lengths, args.repeat = 8, [4], [32, 128, 512], 3
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, batch {args.batch}, "
          f"head size {args.head_dim}")
    rows = run(args)
    table = markdown_table(
        ["heads", "length", "spec", "pass", "fused ms", "SDPA+mask / fused", "Flex / fused", "reference / fused"],
        [[r["heads"], r["length"], r["spec"], r["pass_"], r["fused_ms"], r["sdpa_over_fused"],
          "-" if r["flex_over_fused"] is None else r["flex_over_fused"], r["reference_over_fused"]] for r in rows])
    print(table)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return table


if __name__ == "__main__":
    main()
