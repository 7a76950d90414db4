"""How many distinct (B, S, T) shapes an epoch's training batches come in, and the padding they carry, for each
``train.length_multiple``: under ``train.compile = "reduce-overhead"`` every distinct shape records its own CUDA graphs
on a GPU (``mma_nmt.data.batch_shapes``). Counted from a prepared folder's training lengths, as the trainer batches
them; no model runs, so the counts are exact and the same on any machine.

    python -m benchmarks.batch_shapes runs/data/multi30k_de_en_bpe2k [more folders] [--max-tokens 3000 8000]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks.machine import git_commit
from benchmarks.timing import markdown_table
from mma_nmt.data.batch_shapes import epoch_shapes
from mma_nmt.data.dataset import load_ids
from mma_nmt.data.sampler import TokenBatchSampler

COLUMNS = ["data", "max_tokens", "length_multiple", "batches / epoch", "shapes in epoch 0",
           "shapes in epochs 0-{last}", "padding (epoch 0)"]


def shape_rows(folder: Path, max_tokens: int, multiples: list[int], epochs: int, max_len: int) -> list[list]:
    """One row per multiple: the shape counts of ``folder``'s training split under the trainer's sampler."""
    src = [len(ids) for ids in load_ids(folder / "train.src.pt")]
    tgt = [len(ids) for ids in load_ids(folder / "train.tgt.pt")]
    rows = []
    for multiple in multiples:
        sampler = TokenBatchSampler(src, tgt, max_tokens=max_tokens, seed=1, max_len=max_len,
                                    length_multiple=multiple)
        per_epoch = [epoch_shapes(sampler, src, tgt, epoch) for epoch in range(epochs)]
        union = set().union(*(shapes.shapes for shapes in per_epoch))
        rows.append([folder.name, max_tokens, multiple, per_epoch[0].batches, per_epoch[0].distinct, len(union),
                     f"{per_epoch[0].padding:.1%}"])
    return rows


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folders", nargs="+", type=Path, help="prepared data folders (train.src.pt, train.tgt.pt)")
    parser.add_argument("--max-tokens", type=int, nargs="+", default=[3000, 8000])
    parser.add_argument("--multiples", type=int, nargs="+", default=[1, 8, 16, 32])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--max-len", type=int, default=256, help="train.max_len (its default)")
    args = parser.parse_args(argv)
    rows = [row for folder in args.folders for max_tokens in args.max_tokens
            for row in shape_rows(folder, max_tokens, args.multiples, args.epochs, args.max_len)]
    header = [column.format(last=args.epochs - 1) for column in COLUMNS]
    report = f"<!-- commit {git_commit()} -->\n\n{markdown_table(header, rows)}"
    print(report)
    return report


if __name__ == "__main__":
    main()
