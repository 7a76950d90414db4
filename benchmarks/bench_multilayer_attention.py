"""Multi-layer multi-head attention (SPEC section 3): the fused operator ``mma_nmt::multilayer_attention``, which reads
the per-layer projections in place, against SPEC's formula in plain PyTorch (one logit matrix per encoder layer).

Rows: the attention core (given each layer's projected q/k/v) and the whole MLMHA sublayer, forward and
forward+backward. Standalone runs add the previous design, ``mma_nmt::attention`` on the projections arranged into one
(B, H, L, n*D) tensor (a stack copy, and its backward), to show what reading them in place saves. Paper shapes: IWSLT
(E = 256, H = 4) and WMT base (E = 512, H = 8), 32 sentences of 32 (typical) and 96 (long) target and source tokens.
Goal (issue 8): joint weights with n = 4 at least 2x faster than the reference.

    python -m benchmarks.bench_multilayer_attention [--quick] [--threads N] [--lengths 32 96]
"""

from __future__ import annotations

import argparse
import copy
import math

import torch

from benchmarks.timing import markdown_table, speedup_rows
from mma_nmt.modules import MultiLayerAttentionConfig, MultiLayerMultiheadAttention
from mma_nmt.ops import fused_attention, multilayer_attention
from mma_nmt.reference import multilayer_attention_reference

SHAPES = {"IWSLT (E=256, H=4)": (256, 4), "WMT base (E=512, H=8)": (512, 8)}
BATCH = 32


def _arranged_core(config, q, k, v, lengths, scale):
    """The previous fused design: the n projections stacked into ``mma_nmt::attention``'s layout, and back."""
    heads, n = config.num_heads, config.num_layers
    batch, length = q[0].shape[:2]
    split = lambda x: x.view(x.shape[0], x.shape[1], heads, -1).transpose(1, 2)  # (B, L, E) -> (B, H, L, D)  # noqa

    def arrange(xs):
        if config.layer_specific:
            return torch.stack([split(x) for x in xs], dim=1).flatten(1, 2)  # (B, n*H, L, D)
        return torch.stack([split(x) for x in xs], dim=3).flatten(3)  # (B, H, L, n*D)

    values = [sum(v)] if config.sum_contexts and not config.layer_specific else v
    out = fused_attention(arrange(q), arrange(k), arrange(values), key_lengths=lengths, scale=scale).out
    sets = n if config.layer_specific else len(values)
    if config.layer_specific:
        out = out.view(batch, n, heads, length, -1).permute(0, 3, 1, 2, 4)  # (B, T, n, H, D)
    else:
        out = out.view(batch, heads, length, sets, -1).permute(0, 2, 3, 1, 4)  # (B, T, sets, H, D)
    out = out.reshape(batch, length, sets * config.embed_dim)
    if config.layer_specific and config.sum_contexts:
        out = out.view(batch, length, n, -1).sum(dim=2)
    return out


def _core_pair(module: MultiLayerMultiheadAttention, query, features, lengths):
    """(fused core, reference core, previous arranged core, the projections) on the module's projections of fixed
    inputs."""
    c = module.config
    q = [p(query).detach().requires_grad_() for p in module.q_projs]
    k = [p(f).detach().requires_grad_() for p, f in zip(module.k_projs, features)]
    v = [p(f).detach().requires_grad_() for p, f in zip(module.v_projs, features)]
    scale = 1 / math.sqrt(module.head_dim)
    heads = module._heads

    def fused():
        values = [sum(v)] if c.sum_contexts and not c.layer_specific else v
        out = multilayer_attention(q, k, values, num_heads=c.num_heads, layer_specific=c.layer_specific,
                                   key_lengths=lengths, scale=scale).out
        if c.layer_specific and c.sum_contexts:
            out = out.view(out.shape[0], out.shape[1], c.num_layers, -1).sum(dim=2)
        return out

    def reference():
        return multilayer_attention_reference([heads(x) for x in q], [heads(x) for x in k], [heads(x) for x in v],
                                              layer_specific=c.layer_specific, sum_contexts=c.sum_contexts,
                                              key_lengths=lengths)[0]

    return fused, reference, lambda: _arranged_core(c, q, k, v, lengths, scale), q + k + v


def rows_for(name, embed, heads, variant, layers, length, repeat, *, batch=BATCH, arrangement=True, **timing):
    """Speed-up rows of one case, plus (with ``arrangement``) the fused core against the previous arranged design;
    ``timing``: see ``timing.time_interleaved``."""
    torch.manual_seed(0)
    config = MultiLayerAttentionConfig.from_variant(variant, embed_dim=embed, num_heads=heads, num_layers=layers)
    fused_module = MultiLayerMultiheadAttention(config)
    reference_module = copy.deepcopy(fused_module)
    reference_module.config.implementation = "reference"
    query = torch.randn(batch, length, embed, requires_grad=True)
    features = [torch.randn(batch, length, embed, requires_grad=True) for _ in range(layers)]
    lengths = torch.randint(length // 2, length + 1, (batch,))
    fused_core, reference_core, arranged_core, core_inputs = _core_pair(fused_module, query, features, lengths)
    leaves = [query, *features, *core_inputs, *fused_module.parameters(), *reference_module.parameters()]
    label = f"{name} {variant} n={layers} B={batch} T=S={length}"
    pairs = {"attention core": (fused_core, reference_core),
             "MLMHA sublayer": (lambda: fused_module(query, features, key_lengths=lengths)[0],
                                lambda: reference_module(query, features, key_lengths=lengths)[0])}
    if arrangement:  # "reference ms" of this row is the previous design's
        pairs["attention core vs arranged for `attention` (previous design)"] = (fused_core, arranged_core)
    return speedup_rows(label, pairs, leaves, repeat=repeat, **timing)


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
