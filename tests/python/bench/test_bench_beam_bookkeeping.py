"""``python -m benchmarks.beam_bookkeeping``: both searches run, find the same hypotheses (the benchmark asserts it)
and the table has a row per batch size."""

from __future__ import annotations

from benchmarks.beam_bookkeeping import main


def test_both_walks_are_timed_per_batch_size():
    report = main(["--batches", "2", "3", "--vocabs", "40", "--positions", "4", "--repeat", "1"])
    rows = [line.strip("| ").split(" | ") for line in report.splitlines()[6:]]
    assert [row[0] for row in rows] == ["2", "3"]
    assert all(float(row[4]) > 0 and float(row[5]) > 0 and float(row[6]) > 0 for row in rows)
