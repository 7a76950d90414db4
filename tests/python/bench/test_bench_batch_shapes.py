"""``python -m benchmarks.batch_shapes``: the shape counts of a prepared folder, as the trainer would batch it."""

from __future__ import annotations

from collections import Counter

from benchmarks.batch_shapes import main
from mma_nmt.data import ParallelDataset, collate
from nmt_fixtures import tiny_data  # noqa: F401  (fixture)


def test_the_report_counts_the_shapes_of_the_collated_batches(tiny_data):  # noqa: F811
    report = main([str(tiny_data), "--max-tokens", "200", "--multiples", "1", "4", "--epochs", "2"])
    rows = [line.split(" | ") for line in report.splitlines() if line.startswith(f"| {tiny_data.name} ")]
    assert [(row[1], row[2]) for row in rows] == [("200", "1"), ("200", "4")]
    data = ParallelDataset.load(tiny_data, "train")
    for row in rows:
        multiple = int(row[2])
        sampler = data.batch_sampler(max_tokens=200, seed=1, max_len=256, length_multiple=multiple)
        shapes = [Counter((len(b), b.src.shape[1], b.tgt_in.shape[1])
                          for b in (collate(data, i, length_multiple=multiple) for i in sampler)) for _ in range(2)]
        assert int(row[3]) == sum(shapes[0].values())  # batches in epoch 0
        assert int(row[4]) == len(shapes[0]) and int(row[5]) == len(set(shapes[0]) | set(shapes[1]))
