"""Multi-head Luong attention (SPEC section 2): one decoder step of h heads against precomputed per-head keys and the
shared encoder states, fused (``mma_nmt::shared_value_attention``) against plain PyTorch on the same precomputed keys.

Rows: the step operator alone; the same step through the general ``mma_nmt::attention`` with the shared values expanded
per head (which it copies — why a shared-value operator exists); the paper's whole attention layer for one step (the
module's fused and reference implementations, same output projections); and the operator over all target steps at
once. Forward and forward+backward. Paper shapes (Fung & Mak): IWSLT En-Vi dh = 1024, h = 4, d_sm = 512, d_fd = 1024,
32 sentences; WMT En-De d_sm = 1024, 128 sentences; sources of 30 tokens. Goal (issue 4): the step at least 2x faster.

``--score-forms`` times instead the two forms of the score side by side (issue 49, point 3): the module with
``score_form="projected_query"`` (OpenNMT-py's: no per-head key tensor) against today's ``"projected_keys"``, same
parameters and implementation, for one step on a precomputed memory and for precompute + T sequential steps (the LSTM's
pattern), with sources of 30 and 50 tokens (30 only with ``--quick``); on ``--device cuda`` in ``--dtype`` (bfloat16
first), waiting for the GPU around each timing.

    python -m benchmarks.bench_luong_attention [--quick] [--threads N]
    python -m benchmarks.bench_luong_attention --score-forms [--device cuda] [--dtype bfloat16] [--quick]
"""

from __future__ import annotations

import argparse

import torch

from benchmarks.timing import markdown_table, speedup_rows
from mma_nmt.modules import LuongAttentionConfig, LuongMultiheadAttention
from mma_nmt.ops import fused_attention, shared_value_attention
from mma_nmt.reference import shared_value_attention_reference

SHAPES = {"IWSLT En-Vi (B=32, d_sm=512)": (32, 512), "WMT En-De (B=128, d_sm=1024)": (128, 1024)}
HIDDEN, HEADS, FEED, SRC_LEN, TGT_LEN = 1024, 4, 1024, 30, 30
SCORE_FORM_SRC_LENS = (30, 50)  # the Luong step of issue 49: B 128, S 30 and 50


def _step_ops(batch, steps):
    q = torch.randn(batch, HEADS, steps, HIDDEN, requires_grad=True)
    k = torch.randn(batch, HEADS, SRC_LEN, HIDDEN, requires_grad=True)
    v = torch.randn(batch, SRC_LEN, HIDDEN, requires_grad=True)
    lengths = torch.randint(SRC_LEN // 2, SRC_LEN + 1, (batch,))
    fused = lambda: shared_value_attention(q, k, v, key_lengths=lengths).out  # noqa: E731
    reference = lambda: shared_value_attention_reference(q, k, v, key_lengths=lengths)[0]  # noqa: E731
    general = lambda: fused_attention(q, k, v.unsqueeze(1).expand(-1, HEADS, -1, -1), key_lengths=lengths,  # noqa: E731
                                      scale=1.0).out
    return fused, reference, general, [q, k, v]


def _layer_step(batch, softmax_dim):
    torch.manual_seed(0)
    modules = []
    for implementation in ("fused", "reference"):
        config = LuongAttentionConfig(hidden_dim=HIDDEN, num_heads=HEADS, softmax_dim=softmax_dim, feed_dim=FEED,
                                      implementation=implementation)
        modules.append(LuongMultiheadAttention(config))
    modules[1].load_state_dict(modules[0].state_dict())
    hs = torch.randn(batch, SRC_LEN, HIDDEN, requires_grad=True)
    h_t = torch.randn(batch, HIDDEN, requires_grad=True)
    lengths = torch.randint(SRC_LEN // 2, SRC_LEN + 1, (batch,))
    memory = modules[0].precompute(hs.detach(), key_lengths=lengths)
    memory = memory._replace(keys=memory.keys.detach().requires_grad_(), values=memory.values.requires_grad_())
    leaves = [hs, h_t, memory.keys, memory.values, *modules[0].parameters(), *modules[1].parameters()]
    return (*((lambda m=m: m(h_t, memory)[:2]) for m in modules), leaves)


def score_form_contenders(batch: int, softmax_dim: int, *, steps: int = TGT_LEN, hidden: int = HIDDEN,
                          heads: int = HEADS, feed: int = FEED, src_len: int = SRC_LEN, implementation: str = "fused",
                          device: str = "cpu", dtype: torch.dtype = torch.float32) -> tuple[dict, list[torch.Tensor]]:
    """``{what: (projected-query call, projected-keys call)}`` and the differentiable leaves (encoder states, decoder
    states, both modules' parameters). Each call returns the step outputs (a~, a-) of every step it runs."""
    torch.manual_seed(0)
    modules = []
    for form in ("projected_query", "projected_keys"):
        config = LuongAttentionConfig(hidden_dim=hidden, num_heads=heads, softmax_dim=softmax_dim, feed_dim=feed,
                                      implementation=implementation, score_form=form)
        modules.append(LuongMultiheadAttention(config).to(device=device, dtype=dtype))
    modules[0].load_state_dict(modules[1].state_dict())
    hs = torch.randn(batch, src_len, hidden, device=device, dtype=dtype, requires_grad=True)
    h_t = (torch.randn(batch, steps, hidden, device=device, dtype=dtype) * hidden ** -0.5).requires_grad_()
    lengths = torch.randint(src_len // 2, src_len + 1, (batch,), device=device)
    lengths[0] = src_len

    def one_step(module):
        memory = module.precompute(hs, key_lengths=lengths)  # outside the timed call
        memory = memory._replace(keys=None if memory.keys is None else memory.keys.detach().requires_grad_())
        leaves.extend(t for t in (memory.keys,) if t is not None)
        return lambda: module(h_t[:, 0], memory)[:2]

    def sentence(module):  # precompute, then the decoder's steps one by one
        def run():
            memory = module.precompute(hs, key_lengths=lengths)
            return tuple(out for t in range(steps) for out in module(h_t[:, t], memory)[:2])
        return run

    leaves = [hs, h_t, *modules[0].parameters(), *modules[1].parameters()]
    pairs = {"score forms: one step, memory precomputed (other = projected keys)": tuple(map(one_step, modules)),
             f"score forms: precompute + {steps} steps (other = projected keys)": tuple(map(sentence, modules))}
    return pairs, leaves


def rows_for(name, batch, softmax_dim, repeat, *, whats=None, **timing):
    """Speed-up rows of one shape; ``whats``: the subset of rows to time (default all); ``timing``: see
    ``timing.time_interleaved``."""
    torch.manual_seed(0)
    step_fused, step_reference, step_general, step_leaves = _step_ops(batch, 1)
    all_fused, all_reference, _, all_leaves = _step_ops(batch, TGT_LEN)
    layer_fused, layer_reference, layer_leaves = _layer_step(batch, softmax_dim)
    leaves = step_leaves + all_leaves + layer_leaves
    cases = {
        "step operator (T=1)": (step_fused, step_reference),
        "step via general attention op, v expanded": (step_fused, step_general),
        "attention layer, one step": (layer_fused, layer_reference),
        f"operator over all {TGT_LEN} steps": (all_fused, all_reference),
    }
    cases = {what: pair for what, pair in cases.items() if whats is None or what in whats}
    return speedup_rows(name, cases, leaves, repeat=repeat, **timing)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one shape, fewer repeats (a smoke test)")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's choice)")
    parser.add_argument("--score-forms", action="store_true",
                        help="time score_form='projected_query' against 'projected_keys' instead (issue 49)")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="with --score-forms (default: cpu)")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"],
                        help="with --score-forms (default: float32)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    shapes = list(SHAPES.items())[:1] if args.quick else list(SHAPES.items())
    if args.score_forms:
        print_score_form_rows(shapes, args.device, getattr(torch, args.dtype), repeat=3 if args.quick else 7,
                              src_lens=(SRC_LEN,) if args.quick else SCORE_FORM_SRC_LENS)
        return
    if args.device != "cpu" or args.dtype != "float32":
        parser.error("--device and --dtype apply to --score-forms only")
    rows = []
    for name, shape in shapes:
        rows += rows_for(name, *shape, repeat=3 if args.quick else 7)
    print(f"torch threads: {torch.get_num_threads()}; dh={HIDDEN}, h={HEADS}, d_fd={FEED}, source {SRC_LEN} tokens\n")
    print(markdown_table(["shape", "what", "pass", "other ms", "fused ms", "speed-up"], rows))


def print_score_form_rows(shapes, device: str, dtype: torch.dtype, *, repeat: int,
                          src_lens: tuple[int, ...] = (SRC_LEN,)) -> None:
    timing = {}
    if device == "cuda":
        from benchmarks.cuda_suite import gpu_info, require_cuda
        require_cuda()
        timing["synchronize"] = torch.cuda.synchronize
        print(f"GPU: {gpu_info()}")
    rows = []
    for name, (batch, softmax_dim) in shapes:
        for src_len in src_lens:
            for implementation in ("fused", "reference"):
                pairs, leaves = score_form_contenders(batch, softmax_dim, implementation=implementation, device=device,
                                                      dtype=dtype, src_len=src_len)
                rows += speedup_rows(f"{name} S={src_len} {implementation}", pairs, leaves, repeat=repeat, **timing)
    print(f"{device} {str(dtype).removeprefix('torch.')}; torch threads: {torch.get_num_threads()}; dh={HIDDEN}, "
          f"h={HEADS}, d_fd={FEED}, sources of {list(src_lens)} tokens, {TGT_LEN} steps\n")
    print(markdown_table(["shape", "what", "pass", "projected keys ms", "projected query ms", "speed-up"], rows))


if __name__ == "__main__":
    main()
