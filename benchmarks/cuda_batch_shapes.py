"""What ``train.length_multiple`` buys under ``train.compile = "reduce-overhead"`` on a GPU: the first steps of a
real run, where every new batch shape records its own CUDA graphs, then the same batches again, replayed.

A prepared folder's training split is batched as the trainer batches it (seed 1, ``--max-tokens``), once per length
multiple; a fresh model (a ``benchmarks.cuda_training`` label) trains on the first ``--steps`` batches of epoch 0
(forward, label-smoothed loss, backward, Adam), then on the same batches again. Each step is timed alone
(synchronised). Per multiple: the distinct shapes met, the seconds of the steps that met a shape first (compilation
and recording), the median step of the second pass (replays), and the target tokens per second of each pass. The
padding the multiple adds is in the tokens/s: both passes count real target tokens only.

    python -m benchmarks.cuda_batch_shapes runs/data/multi30k_de_en_bpe2k [--multiples 1 8] [--steps 100]
        [--model "transformer_iwslt_small MMA"] [--compile reduce-overhead] [--precision "autocast bfloat16"]

``--device cpu --compile false`` runs the same loop on the CPU (the tests' smoke run); the numbers mean something on
a GPU only.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from pathlib import Path

import torch

from benchmarks.cuda_training import PRECISIONS, SIZES
from benchmarks.timing import markdown_table
from mma_nmt.data import ParallelDataset, collate
from mma_nmt.data.batch_shapes import epoch_shapes
from mma_nmt.models import build_model
from mma_nmt.training.loss import label_smoothed_cross_entropy
from mma_nmt.training.trainer import compiled, host_fields, with_vocabulary

COLUMNS = ["length_multiple", "steps", "shapes met", "padding (epoch 0)", "first pass s", "of it, first-shape steps s",
           "first pass tok/s", "second pass median step ms", "second pass tok/s"]


def model_config(label: str, data: ParallelDataset):
    """The ``benchmarks.cuda_training`` case ``label``'s fused model, with the prepared folder's vocabularies."""
    case = next(c for sizes in SIZES.values() for c in sizes.models if c.label == label)
    return with_vocabulary(case.config("fused"), data)


def time_passes(data: ParallelDataset, multiple: int, *, max_tokens: int, steps: int, label: str, device: str,
                compile_mode: bool | str, precision: torch.dtype | None) -> list:
    """One table row: ``steps`` batches of epoch 0 at ``multiple``, trained twice by one fresh model."""
    sampler = data.batch_sampler(max_tokens=max_tokens, seed=1, max_len=256, length_multiple=multiple)
    shapes = epoch_shapes(sampler, data.src_lengths, data.tgt_lengths)
    batches = [collate(data, indices, length_multiple=multiple) for indices in sampler.epoch_batches(0)[:steps]]
    config = model_config(label, data)
    torch.manual_seed(0)
    model = compiled(build_model(config).to(device).train(), compile_mode)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    pad = config.pad_id
    keep = host_fields(model)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)

    def step(batch) -> float:
        tokens = batch.num_tokens
        batch = batch.to(device, keep_on_host=keep)
        sync()
        started = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device.split(":")[0], precision) if precision is not None else contextlib.nullcontext():
            logits = model(batch.src, batch.src_lengths, batch.tgt_in)  # (B, T, V): padding carries no loss
            loss, _ = label_smoothed_cross_entropy(logits, batch.tgt_out, epsilon=0.1, ignore_index=pad)
        (loss / tokens).backward()
        optimizer.step()
        sync()
        return time.perf_counter() - started

    seen, first_shape_seconds, first = set(), 0.0, []
    for batch in batches:
        shape = tuple(batch.src.shape) + tuple(batch.tgt_in.shape[1:])  # (B, S, T)
        first.append(step(batch))
        if shape not in seen:
            seen.add(shape)
            first_shape_seconds += first[-1]
    second = [step(batch) for batch in batches]
    tokens = sum(batch.num_tokens for batch in batches)
    return [multiple, len(batches), len(seen), f"{shapes.padding:.1%}", round(sum(first), 2),
            round(first_shape_seconds, 2), round(tokens / sum(first)), round(1000 * statistics.median(second), 2),
            round(tokens / sum(second))]


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data", type=Path, help="a prepared folder (train split and its tokenizers)")
    parser.add_argument("--multiples", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--max-tokens", type=int, default=3000)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--model", default="transformer_iwslt_small MMA",
                        choices=sorted({c.label for sizes in SIZES.values() for c in sizes.models}))
    parser.add_argument("--compile", default="reduce-overhead", dest="compile_mode",
                        help='train.compile\'s value ("false" for eager)')
    parser.add_argument("--precision", default="autocast bfloat16", choices=list(PRECISIONS))
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args(argv)
    compile_mode = False if args.compile_mode.lower() == "false" else args.compile_mode
    data = ParallelDataset.load(args.data, "train")
    rows = [time_passes(data, multiple, max_tokens=args.max_tokens, steps=args.steps, label=args.model,
                        device=args.device, compile_mode=compile_mode, precision=PRECISIONS[args.precision])
            for multiple in args.multiples]
    where = torch.cuda.get_device_name() if args.device.startswith("cuda") else args.device
    report = (f"{args.model}, {args.data.name}, max_tokens {args.max_tokens}, compile {compile_mode}, "
              f"{args.precision}, {where}\n\n{markdown_table(COLUMNS, rows)}")
    print(report)
    return report


if __name__ == "__main__":
    main()
