"""Multi-layer multi-head attention (SPEC section 3): the fused path (``mma_nmt::attention`` on concatenated head
dimensions for joint weights, layers as extra heads for layer-specific ones) against SPEC's formula in plain PyTorch
(one logit matrix per encoder layer).

Rows: the attention core (given each layer's projected q/k/v), the whole MLMHA sublayer, and — to answer whether the
layout change costs anything — the share of the fused core spent arranging the per-layer projections into the
operator's layout. Forward and forward+backward, paper shapes: IWSLT (E = 256, H = 4) and WMT base (E = 512, H = 8),
32 sentences of 32 (typical) and 96 (long) target and source tokens. Goal (issue 4): joint weights with n = 4 at
least 2x faster.

    python -m benchmarks.bench_multilayer_attention [--quick] [--threads N] [--lengths 32 96]
"""

from __future__ import annotations

import argparse
import copy
import math

import torch

from benchmarks.timing import markdown_table, speedup_rows, time_interleaved
from mma_nmt.modules import MultiLayerAttentionConfig, MultiLayerMultiheadAttention
from mma_nmt.ops import fused_attention
from mma_nmt.reference import multilayer_attention_reference

SHAPES = {"IWSLT (E=256, H=4)": (256, 4), "WMT base (E=512, H=8)": (512, 8)}
BATCH = 32


def _core_pair(module: MultiLayerMultiheadAttention, query, features, lengths):
    """(fused core, reference core, arrangement only, fused core on already arranged inputs, the projections) on the
    module's projections of fixed inputs."""
    c = module.config
    q = [p(query).detach().requires_grad_() for p in module.q_projs]
    k = [p(f).detach().requires_grad_() for p, f in zip(module.k_projs, features)]
    v = [p(f).detach().requires_grad_() for p, f in zip(module.v_projs, features)]
    heads = module._heads
    joint = not c.layer_specific

    def arranged():
        qa, ka = module._arrange(q, joint), module._arrange(k, joint)
        va = heads(sum(v)) if joint and c.sum_contexts else module._arrange(v, joint)
        return qa, ka, va

    def attend(qa, ka, va):
        out = fused_attention(qa, ka, va, key_lengths=lengths, scale=1 / math.sqrt(module.head_dim)).out
        return module._combine(out, query.shape[0], query.shape[1])

    def fused():
        return attend(*arranged())

    def reference():
        return multilayer_attention_reference([heads(x) for x in q], [heads(x) for x in k], [heads(x) for x in v],
                                              layer_specific=c.layer_specific, sum_contexts=c.sum_contexts,
                                              key_lengths=lengths)[0]

    with torch.no_grad():
        ready = arranged()
    return fused, reference, arranged, lambda: attend(*ready), q + k + v


def rows_for(name, embed, heads, variant, layers, length, repeat, *, batch=BATCH, arrangement=True, **timing):
    """Speed-up rows of one case, plus (with ``arrangement``) the share of the fused core spent arranging the
    projections; ``timing``: see ``timing.time_interleaved``."""
    torch.manual_seed(0)
    config = MultiLayerAttentionConfig.from_variant(variant, embed_dim=embed, num_heads=heads, num_layers=layers)
    fused_module = MultiLayerMultiheadAttention(config)
    reference_module = copy.deepcopy(fused_module)
    reference_module.config.implementation = "reference"
    query = torch.randn(batch, length, embed, requires_grad=True)
    features = [torch.randn(batch, length, embed, requires_grad=True) for _ in range(layers)]
    lengths = torch.randint(length // 2, length + 1, (batch,))
    fused_core, reference_core, arrange, arranged_core, core_inputs = _core_pair(fused_module, query, features,
                                                                                 lengths)
    leaves = [query, *features, *core_inputs, *fused_module.parameters(), *reference_module.parameters()]
    label = f"{name} {variant} n={layers} B={batch} T=S={length}"
    pairs = {"attention core": (fused_core, reference_core),
             "MLMHA sublayer": (lambda: fused_module(query, features, key_lengths=lengths)[0],
                                lambda: reference_module(query, features, key_lengths=lengths)[0])}
    rows = speedup_rows(label, pairs, leaves, repeat=repeat, **timing)
    if not arrangement:
        return rows
    with torch.no_grad():
        t_arrange, t_core, t_ready, t_reference = time_interleaved(
            [arrange, fused_core, arranged_core, reference_core], repeat=repeat)
    rows.append([label, "q/k/v arrangement / fused core", "fwd", "-", f"{t_arrange * 1e3:.2f} / {t_core * 1e3:.2f}",
                 f"{100 * t_arrange / t_core:.0f}%"])
    # What a fused core that read the per-layer projections in place (no arrangement) could reach at most.
    rows.append([label, "attention core on pre-arranged q/k/v (ceiling without the arrangement)", "fwd",
                 t_reference * 1e3, t_ready * 1e3, t_reference / t_ready])
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one shape and variant, fewer repeats (a smoke test)")
    parser.add_argument("--lengths", type=int, nargs="+", default=[32, 96],
                        help="target = source lengths to measure (default: 32 96)")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's choice)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    cases = [("WMT base (E=512, H=8)", "M-00", 4)] if args.quick else [
        (name, variant, layers) for name in SHAPES for variant, layers in
        [("M-00", 4), ("M-01", 4), ("M-10", 4), ("M-11", 4), ("M-00", 6)]]
    rows = []
    for length in args.lengths:
        for name, variant, layers in cases:
            rows += rows_for(name, *SHAPES[name], variant, layers, length, repeat=3 if args.quick else 5)
    print(f"torch threads: {torch.get_num_threads()}; batch {BATCH} sentences\n")
    print(markdown_table(["case", "what", "pass", "reference ms", "fused ms", "speed-up"], rows))


if __name__ == "__main__":
    main()
