"""Where the time of one training step of the end-to-end benchmark goes (``section_end_to_end``), by part of the
model, with ``torch.profiler``:

    python -m benchmarks.profile_end_to_end [--model transformer_tiny:MMA:128 ...] [--steps 3] [--table 12]

Forward time of a part is the wall time of its modules' forward calls (Python included; inner parts are subtracted
from outer ones). Backward time of a part is the time of the autograd nodes its forward ops created, matched by
autograd sequence number. Parts:

- ``attn.core``: the attention computation proper: the fused operator, or the reference formula (masks included);
- ``attn.gmm_predictor``: the GMM mixture/gate predictor networks and the conversion to the operator's inputs;
- ``attn.other``: the rest of the attention modules: Q/K/V/output projections, head split/merge, key lengths;
- ``ffn``, ``norm+residual`` (LayerNorm, dropout, residual adds), ``embed``, ``output+loss`` (output layer, log-softmax,
  loss), ``optimizer`` (zero_grad, Adam step), ``unattributed`` (autograd engine and Python between the parts).

Shares printed are of the summed profiled step time; the profiler adds a few microseconds per op, so small-op-heavy
parts look somewhat larger than in an unprofiled run.
"""

from __future__ import annotations

import argparse
import functools
import inspect
from collections import defaultdict

import torch
from torch.autograd.profiler import record_function

from benchmarks.section_end_to_end import SIZES, model_config, prepared_multi30k
from mma_nmt.data import ParallelDataset, collate
from mma_nmt.models import build_model
from mma_nmt.models.transformer import TransformerEmbedding
from mma_nmt.models.transformer_layers import FeedForward, Sublayer
from mma_nmt.training.loss import label_smoothed_cross_entropy

PREFIX = "part:"
BACKWARD = "autograd::engine::evaluate_function: "


def _wrap(obj, method: str, label: str) -> None:
    """Replaces ``obj.method`` by a version running inside ``record_function(PREFIX + label)``."""
    original = getattr(obj, method)

    @functools.wraps(original)
    def wrapped(*args, **kwargs):
        with record_function(PREFIX + label):
            return original(*args, **kwargs)

    setattr(obj, method, wrapped)


def instrument(model: torch.nn.Module) -> None:
    """Labels the forward calls of every part of ``model`` (see the module docstring)."""
    from mma_nmt.modules.gmm_predictors import MixturePredictor

    for layer in (*model.encoder_layers, *model.decoder_layers):
        for name in ("self_attn", "cross_attn"):
            attn = getattr(layer, name, None)
            if attn is None:
                continue
            _wrap(attn, "forward", "attn.other")
            inner = getattr(attn, "attn", attn)
            if isinstance(inner, torch.nn.MultiheadAttention):
                continue  # nn.MultiheadAttention: everything is in attn.other
            for method in ("attend", "attend_gmm", "attend_dot"):
                if hasattr(inner, method):
                    _wrap(inner, method, "attn.core")
    for module in model.modules():
        if isinstance(module, MixturePredictor):
            _wrap(module, "forward", "attn.gmm_predictor")
        elif isinstance(module, FeedForward):
            _wrap(module, "forward", "ffn")
        elif isinstance(module, Sublayer):
            _wrap(module, "forward", "norm+residual")
        elif isinstance(module, TransformerEmbedding):
            _wrap(module, "forward", "embed")


def step_fn(config, batch, instrumented: bool):
    torch.manual_seed(0)
    model = build_model(config).train()
    if instrumented:
        instrument(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)

    real = batch.tgt_out != config.pad_id  # (B, T)
    packed = "output_mask" in inspect.signature(model.forward).parameters  # (older trees: logits everywhere)

    def step():
        with record_function(PREFIX + "optimizer"):
            optimizer.zero_grad(set_to_none=True)
        with record_function(PREFIX + "output+loss"):  # decode's output layer is outside every other part
            if packed:
                logits = model(batch.src, batch.src_lengths, batch.tgt_in, output_mask=real)  # (N, V)
                target = batch.tgt_out[real]
            else:
                logits, target = model(batch.src, batch.src_lengths, batch.tgt_in), batch.tgt_out  # (B, T, V)
            loss, _ = label_smoothed_cross_entropy(logits, target, epsilon=0.1, ignore_index=config.pad_id)
        (loss / batch.num_tokens).backward()
        with record_function(PREFIX + "optimizer"):
            optimizer.step()

    return step


def _part_of(event) -> str | None:
    """The innermost part scope around a forward event (itself included)."""
    while event is not None:
        if event.name.startswith(PREFIX):
            return event.name[len(PREFIX):]
        event = event.cpu_parent
    return None


def shares(events, steps: int) -> dict[str, float]:
    """Milliseconds per step of every part, forward and backward together."""
    ms = defaultdict(float)
    sequence_part = {}
    total = 0.0
    for e in events:
        if e.name.startswith(PREFIX):
            inner = sum(c.cpu_time_total for c in _descendant_parts(e))
            ms[e.name[len(PREFIX):]] += (e.cpu_time_total - inner) / 1e3
        if e.cpu_parent is None:
            total += e.cpu_time_total / 1e3
        if e.sequence_nr >= 0 and not e.name.startswith(BACKWARD):
            # ops that create no autograd node share the number of the next one: the latest op decides
            # (backward ops carry their node's number too, but lie outside every part)
            part = _part_of(e)
            start, _ = sequence_part.get(e.sequence_nr, (-1, None))
            if part is not None and e.time_range.start >= start:
                sequence_part[e.sequence_nr] = (e.time_range.start, part)
    for e in events:
        if e.name.startswith(BACKWARD):
            part = sequence_part.get(e.sequence_nr, (0, None))[1] or "unattributed"
            if e.name.endswith("AccumulateGrad"):
                part = "optimizer"  # gradient accumulation into .grad
            ms[part] += e.cpu_time_total / 1e3
            # a backward node nested in a forward part scope (does not happen on CPU) would be counted twice
    ms["total"] = total
    ms["unattributed"] += total - sum(v for k, v in ms.items() if k != "total")
    return {k: v / steps for k, v in ms.items()}


def _descendant_parts(event):
    """The outermost part scopes strictly inside ``event``."""
    found = []
    for child in event.cpu_children:
        if child.name.startswith(PREFIX):
            found.append(child)
        else:
            found.extend(_descendant_parts(child))
    return found


ORDER = ("attn.core", "attn.gmm_predictor", "attn.other", "ffn", "norm+residual", "embed", "output+loss", "optimizer",
         "unattributed")


def profile(config, batch, steps: int, table: int) -> tuple[dict, str]:
    step = step_fn(config, batch, instrumented=True)
    for _ in range(2):
        step()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            step()
    events = prof.events()
    top = events.key_averages().table(sort_by="self_cpu_time_total", row_limit=table, max_name_column_width=60)
    return shares(events, steps), top


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", action="append", help="preset:MMA|GMM:sentences (default: the full profile's)")
    parser.add_argument("--impl", action="append", choices=("fused", "reference", "torch"))
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--table", type=int, default=0, help="also print the top N ops by self CPU time")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    sizes = SIZES["full"]
    models = [(m.split(":")[0], m.split(":")[1], int(m.split(":")[2])) for m in args.model] if args.model \
        else sizes.train_models
    train = ParallelDataset.load(prepared_multi30k(sizes), "train")
    order = torch.randperm(len(train), generator=torch.Generator().manual_seed(0)).tolist()
    header = "| model | impl | step ms | " + " | ".join(ORDER) + " |"
    rows, bounds = [], []
    for name, attention, sentences in models:
        batch = collate(train, order[:sentences])
        steps = {}
        for impl in args.impl or ("fused", "reference"):
            config = model_config(name, attention, impl, train)
            if impl == "torch" and attention == "GMM":
                continue
            parts, top = profile(config, batch, args.steps, args.table)
            steps[impl] = parts
            total = parts["total"]
            cells = [f"{parts.get(k, 0.0):.1f} ({100 * parts.get(k, 0.0) / total:.0f}%)" for k in ORDER]
            rows.append(f"| {name}, {attention} ({len(batch)} x {batch.src.shape[1]}/{batch.tgt_in.shape[1]}) | "
                        f"{impl} | {total:.1f} | " + " | ".join(cells) + " |")
            if args.table:
                print(f"\n### {name}, {attention}, {impl}: top {args.table} ops by self CPU time "
                      f"({args.steps} steps)\n")
                print(top)
            print(rows[-1], flush=True)
        if "fused" in steps and "reference" in steps:
            bounds.append(f"| {name}, {attention} | " + amdahl(steps["fused"], steps["reference"]) + " |")
    print("\n" + header + "\n|" + "---|" * (3 + len(ORDER)))
    print("\n".join(rows))
    if bounds:
        print("\n| model | attention-specific share of the reference step | fused / reference, profiled | the same "
              "from the parts (rest of fused step as in reference) | bound (fused attention in zero time) |\n"
              "|---|---|---|---|---|")
        print("\n".join(bounds))


SPECIFIC = ("attn.core",)  # the only part whose code differs between fused and reference (the rest is shared)


def amdahl(fused: dict, reference: dict) -> str:
    """Share of the reference step that the implementation choice can change, and the ratios it allows."""
    ref_total, specific = reference["total"], sum(reference.get(k, 0.0) for k in SPECIFIC)
    fused_specific = sum(fused.get(k, 0.0) for k in SPECIFIC)
    return (f"{100 * specific / ref_total:.0f}% | {ref_total / fused['total']:.2f} | "
            f"{ref_total / (ref_total - specific + fused_specific):.2f} | {ref_total / (ref_total - specific):.2f}")


if __name__ == "__main__":
    main()
