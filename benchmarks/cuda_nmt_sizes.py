"""Attention and the decoder-side operators at the sizes NMT training uses, on one GPU (issue 48 point 3, issue 49
points 1 and 5): for every contender of a call, its median time, the launches the host issues per call, whether it
waits for the host, its peak memory and (pass ``graphs``) its time replayed from a CUDA graph.

    python -m benchmarks.cuda_nmt_sizes --out DIR [--only GROUP ...] [--deadline SECONDS] [--dtype bfloat16]
    python -m benchmarks.cuda_nmt_sizes --render DIR      # DIR/nmt_sizes.md from the rows measured so far

Each measured case appends its rows to ``DIR/nmt_sizes.jsonl`` at once, so a run cut off by a time limit keeps what it
measured; ``--deadline`` (seconds from the start) stops starting new cases. The contenders of one case are timed
interleaved in one process: read the ratios, not the absolute times (the GPU may be shared with other work).

Contenders of attention: ``ours`` in the dispatch modes (``MMA_NMT_CUDA_KERNELS`` unset, ``handwritten``, ``rows``
(the warp-per-row kernels instead of the tiled ones), ``flash``, and in float32/float64 ``composition``, the default
there until 2026-12-02: read at every call), the plain formula of SPEC
(``reference``), ``SDPA-flash`` where flash can serve (no padding, all-G or causal), ``SDPA+mask`` (the (B, H, T, S)
visibility mask a user would pass), and, in the ``flex`` group, compiled FlexAttention with its block mask built once
and built again at every call (what a new padded batch costs). q, k and v are views of (B, T, H, D) projections, as
the modules make them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import torch
import torch.nn.functional as F

from benchmarks import cuda_operators
from benchmarks.flex import compiled_flex_attention, mask_mod_for
from benchmarks.gpu_counters import graph_replay_seconds, host_sync, launch_profile, peak_memory_mib
from benchmarks.timing import markdown_table, pass_name, time_interleaved, timed_call
from mma_nmt.ops import HeadKind, fused_attention, parse_head_spec
from mma_nmt.reference import attention_reference, visibility_mask

DISPATCH = "MMA_NMT_CUDA_KERNELS"
ROWS_FILE, REPORT_FILE = "nmt_sizes.jsonl", "nmt_sizes.md"
TIMING = dict(repeat=5, warmup=1, min_seconds=0.01)
NMT_CORE = ((128, 32), (64, 64), (32, 128), (256, 32), (128, 64), (64, 128))  # (B, T): 4k, then 8k tokens
LONG = ((32, 512), (16, 1024), (8, 2048))  # about 16k tokens
SPECS = (("G", False), ("G", True), ("GLFB", True), ("C", False), ("C", True))  # (head kinds, padded keys)


@dataclass(frozen=True)
class Case:
    """One call at one size. ``make(device, dtype)`` returns (contender name -> call returning the differentiable
    output(s), the differentiable leaves)."""

    group: str
    what: str
    shape: str
    make: Callable[[str, torch.dtype], tuple[dict[str, Callable], list[torch.Tensor]]]
    count_launches: bool = True


@contextlib.contextmanager
def dispatch(mode: str | None) -> Iterator[None]:
    """``MMA_NMT_CUDA_KERNELS`` set to ``mode`` (unset for None) for the duration, then restored."""
    old = os.environ.get(DISPATCH)
    if mode is None:
        os.environ.pop(DISPATCH, None)
    else:
        os.environ[DISPATCH] = mode
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(DISPATCH, None)
        else:
            os.environ[DISPATCH] = old


MODES = {"ours default": None, "ours handwritten": "handwritten", "ours rows": "rows", "ours flash": "flash",
         "ours composition": "composition"}


def in_mode(mode: str | None, call: Callable) -> Callable:
    """``call`` with ``MMA_NMT_CUDA_KERNELS`` set to ``mode``: wrap the whole timed call, so that the backward pass
    (which autograd runs after the forward function returns) takes the same dispatch as the forward."""
    def wrapped():
        with dispatch(mode):
            return call()
    return wrapped


def ours(fn: Callable, modes=(None, "handwritten", "rows", "flash"), dtype: torch.dtype | None = None
         ) -> dict[str, Callable]:
    """Our operator under each dispatch mode; :func:`measure` applies the mode around forward and backward. In float32
    and float64 (``dtype``) also ``composition``: the compositions of PyTorch's kernels, every call's default there
    until 2026-12-02 and now only long calls' (in half precision that mode hands attention to the hand-written
    kernels, so it would time nothing new; GMM's cases ask for it in every dtype)."""
    if dtype in (torch.float32, torch.float64):
        modes = (*modes, "composition")
    return {name: fn for name, mode in MODES.items() if mode in modes}


def _lengths(batch: int, length: int, device: str) -> torch.Tensor:
    """Key lengths drawn in [length / 2, length] (fixed per size), the first sentence full."""
    generator = torch.Generator().manual_seed(batch * 1000 + length)
    lengths = torch.randint(max(1, length // 2), length + 1, (batch,), generator=generator).to(device)
    lengths[0] = length
    return lengths


def _projections(batch: int, length: int, heads: int, head_dim: int, device: str, dtype: torch.dtype, count: int = 3):
    """``count`` leaves (B, T, H, D), and a function giving their (B, H, T, D) views, for each call to take anew as a
    module does. Views made once, outside the calls, would put their autograd nodes into every call's graph, created
    on the default stream before any capture: the backward of a CUDA-graph capture then waits on that stream, which
    invalidates the capture (the attention steps' "operation failed due to a previous error during capture" of
    2026-11-28 and 2026-11-29, for every contender, torch's own SDPA included)."""
    leaves = [torch.randn(batch, length, heads, head_dim, device=device, dtype=dtype, requires_grad=True)
              for _ in range(count)]
    return leaves, lambda: [leaf.transpose(1, 2) for leaf in leaves]  # (B, T, H, D) -> (B, H, T, D) views


def attention_case(group: str, spec: str, padded: bool, batch: int, length: int, heads: int, head_dim: int,
                   *, flex: bool = False, count_launches: bool = True) -> Case:
    def make(device, dtype):
        leaves, heads_of = _projections(batch, length, heads, head_dim, device, dtype)
        kinds = parse_head_spec(spec, heads)
        # Unpadded: no key lengths at all (full-length lengths would take the padded paths: flash's variable-length call)
        lengths = _lengths(batch, length, device) if padded else None
        options = dict(head_kinds=kinds, key_lengths=lengths, window=1)
        # MMA_NMT_CUDA_KERNELS=flash serves every case here: unpadded uniform kinds batched, padded ones (and GLFB's
        # groups, padded self-attention) as variable-length sequences over the rows in place (since 2026-12-01). These
        # are self-attention, said as the encoder's module says it: FA2 may leave the padding query rows out.
        calls = ours(lambda: fused_attention(*heads_of(), **options, self_attention=True).out,
                     modes=(None, "handwritten", "rows", "flash"), dtype=dtype)
        calls["reference"] = lambda: attention_reference(*heads_of(), **options)[0]
        if not padded and spec in ("G", "C") and dtype in (torch.float16, torch.bfloat16) and device == "cuda":
            calls["SDPA-flash"] = lambda: _sdpa_flash(*heads_of(), causal=spec == "C")
        visible = visibility_mask(kinds, length, length, window=1, key_lengths=lengths, batch=batch, device=device)
        calls["SDPA+mask"] = lambda: F.scaled_dot_product_attention(*heads_of(), attn_mask=visible)
        if flex:
            calls.update(_flex_contenders(heads_of, kinds, lengths, device))
        return calls, leaves
    return Case(group, f"attention {spec}{' padded' if padded else ''}",
                f"B={batch} T=S={length} H={heads} D={head_dim}", make, count_launches)


def _sdpa_flash(q, k, v, *, causal: bool):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def _flex_contenders(heads_of: Callable, kinds, lengths, device) -> dict[str, Callable]:
    from torch.nn.attention.flex_attention import create_block_mask

    batch, heads, length, _ = heads_of()[0].shape
    mask_mod = mask_mod_for(kinds, 1, lengths)
    flex = compiled_flex_attention()
    once = create_block_mask(mask_mod, batch, heads, length, length, device=device)

    def rebuilt():  # a new batch: its padding gives a new block mask
        block_mask = create_block_mask(mask_mod, batch, heads, length, length, device=device, _compile=True)
        return flex(*heads_of(), block_mask=block_mask)
    return {"Flex, mask once": lambda: flex(*heads_of(), block_mask=once), "Flex, mask per call": rebuilt}


def attention_step_case(spec: str, batch: int, source: int, heads: int = 8, head_dim: int = 64) -> Case:
    """Incremental decoding: one query against ``source`` cached keys (C: the query is the last position)."""
    def make(device, dtype):
        leaves, query_of = _projections(batch, 1, heads, head_dim, device, dtype, count=1)
        cached, keys_of = _projections(batch, source, heads, head_dim, device, dtype, count=2)

        def heads_of():
            return query_of() + keys_of()
        kinds = parse_head_spec(spec, heads)
        causal = kinds[0] == HeadKind.CAUSAL
        lengths = None if causal else _lengths(batch, source, device)  # a beam step has no key padding
        options = dict(head_kinds=kinds, key_lengths=lengths, query_offset=source - 1 if causal else 0)
        calls = ours(lambda: fused_attention(*heads_of(), **options).out, modes=(None, "handwritten", "rows"),
                     dtype=dtype)
        calls["reference"] = lambda: attention_reference(*heads_of(), **options)[0]
        visible = visibility_mask(kinds, 1, source, window=1, key_lengths=lengths, batch=batch, device=device,
                                  query_offset=options["query_offset"])
        calls["SDPA+mask"] = lambda: F.scaled_dot_product_attention(*heads_of(), attn_mask=visible)
        return calls, leaves + cached
    return Case("decoder", f"attention step {spec}", f"B={batch} T=1 S={source} H={heads} D={head_dim}", make)


def operator_case(case: cuda_operators.OperatorCase, what: str | None = None,
                  modes: tuple = (None, "handwritten")) -> Case:
    """A case of the operators section in the default and hand-written dispatch modes (or ``modes``), and in
    float32/float64 the compositions' (flash serves none of these operators)."""
    def make(device, dtype):
        fused, reference, leaves = case.make(device, dtype)
        return {**ours(fused, modes=modes, dtype=dtype), "reference": reference}, leaves
    return Case("decoder", what or case.operator, case.shape, make)


def gmm_step_case(batch: int, source: int, heads: int = 8, components: int = 4, head_dim: int = 64) -> Case:
    """The GMM cross-attention of one decoder step: one query against ``source`` keys."""
    return operator_case(cuda_operators.gmm_case(batch, heads, source, components, head_dim, queries=1),
                         "gmm_attention step")


def cases(group: str) -> list[Case]:
    if group in ("attention", "attention_h4"):
        heads, head_dim = (8, 64) if group == "attention" else (4, 128)
        return [attention_case(group, spec, padded, b, t, heads, head_dim, count_launches=(b * t == 4096))
                for b, t in NMT_CORE for spec, padded in SPECS]
    if group == "long":
        return [attention_case(group, spec, padded, b, t, 8, 64) for b, t in LONG for spec, padded in SPECS
                if padded or spec == "C"]
    if group == "flex":
        return [attention_case(group, spec, True, b, t, 8, 64, flex=True, count_launches=False)
                for b, t in ((64, 64), (32, 128), (16, 1024)) for spec in ("GLFB", "G")]
    if group == "decoder":
        # GMM on contiguous heads, then as the module hands it the heads (views of its projections; 2026-11-30), then
        # past the block-per-head kernels' 48 KiB of shared memory (D 64, K 4: from about 85 keys in float32, 160 in
        # half precision), where every dtype takes the composition by default since 2026-12-03 (half precision took
        # the one-warp-per-row kernels, `rows` here) and `handwritten` the opted-in block kernels: issue 49 point 2
        # asks for S and T up to a few hundred. `composition` in every dtype for GMM: its attention half is ours.
        gmm = [cuda_operators.gmm_case(b, 8, s) for s in (32, 64) for b in (64, 128)] + [
            cuda_operators.gmm_case(b, 8, s, head_views=True) for s, b in ((32, 128), (64, 128))]
        long_gmm = [operator_case(cuda_operators.gmm_case(64, 8, s), modes=(None, "handwritten", "rows", "composition"))
                    for s in (128, 256)]
        luong = [cuda_operators.shared_value_case(128, hidden=1024, heads=4, source=s) for s in (30, 50)]
        hop = [f(b, t, 512, 8) for b, t in ((128, 32), (64, 64)) for f in (cuda_operators.head_gate_case,
                                                                            cuda_operators.second_hop_case)]
        # The decoder's attention over the top 4 encoder layers (MLMHA, issue 48's multilayer_attention target).
        layers = [cuda_operators.multilayer_case(b, t, 512, 8) for b, t in ((128, 32), (64, 64))]
        # The attention steps last: in the graphs pass a failed capture leaves the CUDA context unusable for the rest.
        steps = [gmm_step_case(128, s) for s in (32, 64)] + [
            attention_step_case(spec, 128, s) for spec in ("C", "G") for s in (32, 64)]
        return [operator_case(c) for c in gmm] + long_gmm + [operator_case(c) for c in luong + hop + layers] + steps
    if group == "tiny":  # the CPU smoke test's sizes
        return [attention_case(group, spec, padded, 2, 9, 4, 8) for spec, padded in SPECS] + [
            attention_step_case("C", 2, 7, heads=4, head_dim=8), gmm_step_case(2, 7, heads=2, head_dim=8),
            operator_case(cuda_operators.gmm_case(2, 2, 8)),
            operator_case(cuda_operators.gmm_case(2, 2, 8, head_views=True)),
            operator_case(cuda_operators.shared_value_case(2, hidden=16, source=5))]
    raise ValueError(f"unknown group {group!r}; known: {GROUPS}")


GROUPS = ("attention", "decoder", "attention_h4", "long", "flex", "tiny")


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0][:240] if text else ''}"


def measure(case: Case, device: str, dtype: torch.dtype, *, graphs: bool = False) -> list[dict]:
    """One row per contender and pass: ms (median, interleaved with the case's other contenders), and on CUDA
    launches, host_sync, peak_mib and with ``graphs`` replay_ms; ``error`` where a contender failed."""
    calls, leaves = case.make(device, dtype)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    rows = []
    for backward in (False, True):
        base = dict(group=case.group, what=case.what, shape=case.shape, dtype=str(dtype).removeprefix("torch."),
                    pass_=pass_name(backward))
        runnable = {}
        for name, fn in calls.items():
            call = in_mode(MODES.get(name), timed_call(fn, backward, leaves))
            try:
                call()
                sync()
                runnable[name] = call
            except Exception as error:  # a contender that cannot run this case says why in its row
                rows.append({**base, "contender": name, "error": _first_line(error)})
        seconds = time_interleaved(list(runnable.values()), synchronize=sync, **TIMING)
        for (name, call), s in zip(runnable.items(), seconds):
            row = {**base, "contender": name, "ms": s * 1e3}
            if device == "cuda":
                row.update(_gpu_counters(call, case.count_launches, graphs))
            rows.append(row)
    return rows


def _gpu_counters(call, count_launches: bool, graphs: bool) -> dict:
    out = {"peak_mib": peak_memory_mib(call), "host_sync": host_sync(call)}
    if count_launches:
        out["launches"], out["kernels"] = launch_profile(call)  # the kernels: where the launches go
    if graphs:
        if out["host_sync"]:
            out["replay"] = "not captured: waits for the host"
        else:
            try:
                out["replay_ms"] = graph_replay_seconds(call, **TIMING) * 1e3
            except Exception as error:
                out["replay"] = f"capture failed: {_first_line(error)}"
    return out


def run(groups: list[str], out_dir: Path, *, device: str, dtype: torch.dtype, deadline: float | None,
        graphs: bool, log=print) -> int:
    """Measures each group's cases in order, appending rows to ``out_dir/nmt_sizes.jsonl``; returns the count."""
    out_dir.mkdir(parents=True, exist_ok=True)
    start, done = time.monotonic(), 0
    with open(out_dir / ROWS_FILE, "a") as sink:
        for group in groups:
            for case in cases(group):
                if deadline is not None and time.monotonic() - start > deadline:
                    log(f"[nmt_sizes] deadline reached at {time.monotonic() - start:.0f} s; {case.what} "
                        f"{case.shape} and later cases not run")
                    return done
                began = time.monotonic()
                try:
                    rows = measure(case, device, dtype, graphs=graphs)
                except Exception as error:
                    rows = [dict(group=case.group, what=case.what, shape=case.shape, error=_first_line(error))]
                for row in rows:
                    row["graphs_pass"] = graphs
                    sink.write(json.dumps(row) + "\n")
                sink.flush()
                done += 1
                log(f"[nmt_sizes] {case.group} {case.what} {case.shape} {str(dtype).removeprefix('torch.')}: "
                    f"{time.monotonic() - began:.1f} s")
    return done


def render(out_dir: Path) -> str:
    """The Markdown report of ``out_dir/nmt_sizes.jsonl``: one table per group and dtype, a row per case and pass,
    each contender's ms, ratio to ``ours default`` (> 1: ours is faster), launches, peak MiB and replay ms."""
    rows = [json.loads(line) for line in (out_dir / ROWS_FILE).read_text().splitlines() if line.strip()]
    replay = {_key(r): r for r in rows if r.get("graphs_pass")}
    lines = [f"# Attention and decoder operators at NMT sizes ({ROWS_FILE})", ""]
    keys = []
    for r in rows:
        key = (r["group"], r.get("dtype", "?"))
        if key not in keys and not r.get("graphs_pass"):
            keys.append(key)
    for group, dtype in keys:
        table = []
        for r in rows:
            if r["group"] != group or r.get("dtype", "?") != dtype or r.get("graphs_pass"):
                continue
            base = next((x for x in rows if _key(x)[:5] == _key(r)[:5] and x.get("contender") == "ours default"
                         and "ms" in x and not x.get("graphs_pass")), None)
            graph = replay.get(_key(r), {})
            ratio = r["ms"] / base["ms"] if "ms" in r and base else None
            table.append([r["what"], r["shape"], r.get("pass_", ""), r.get("contender", ""),
                          _cell(r.get("ms")), _cell(ratio), r.get("launches", "-"), _cell(r.get("peak_mib")),
                          "no" if r.get("host_sync") is None and "ms" in r else ("yes" if r.get("host_sync") else "-"),
                          _cell(graph.get("replay_ms")) if "replay_ms" in graph else graph.get("replay", "-"),
                          r.get("error", "")])
        lines += [f"## {group}, {dtype}", "", markdown_table(
            ["call", "shape", "pass", "contender", "ms", "contender / ours default", "launches", "peak MiB",
             "waits for host", "graph replay ms", "error"], table), ""]
    return "\n".join(lines)


def _key(row: dict) -> tuple:
    return row["group"], row["what"], row["shape"], row.get("dtype"), row.get("pass_"), row.get("contender")


def _cell(value) -> str:
    return "-" if value is None else f"{value:.3f}" if isinstance(value, float) else str(value)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cuda_nmt_sizes", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder of nmt_sizes.jsonl and nmt_sizes.md")
    parser.add_argument("--only", action="append", choices=GROUPS, help="groups to run, in order (default: all "
                        "but tiny)")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32", "float64"])
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--deadline", type=float, help="seconds after which no new case starts")
    parser.add_argument("--graphs", action="store_true", help="also replay each contender from a CUDA graph")
    parser.add_argument("--render", action="store_true", help="only write nmt_sizes.md from the rows so far")
    args = parser.parse_args(argv)
    if not args.render:
        if args.device == "cuda":
            from benchmarks.cuda_suite import gpu_info, require_cuda
            require_cuda()
            print(f"[nmt_sizes] {gpu_info()}")
        groups = args.only or [g for g in GROUPS if g != "tiny"]
        run(groups, args.out, device=args.device, dtype=getattr(torch, args.dtype), deadline=args.deadline,
            graphs=args.graphs)
    (args.out / REPORT_FILE).write_text(render(args.out))


if __name__ == "__main__":
    main()
