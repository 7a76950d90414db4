"""``python -m benchmarks.cuda_search`` on the CPU, eager: the loop a GPU lease runs under decode.compile."""

from __future__ import annotations

from benchmarks.cuda_search import main


def test_the_search_is_timed_eager_then_twice_and_compared_with_eager():
    report = main(["--preset", "lstm_tiny", "--dtype", "float32", "--device", "cpu", "--compile", "false",
                   "--sentences", "10", "--batch-size", "4", "--src-len", "9", "--max-len", "5", "--beam", "2"])
    rows = [line.strip("| ").split(" | ") for line in report.splitlines()[6:]]
    assert [(row[0], row[1]) for row in rows] == [("eager", "-"), ("decode.compile=false", "first"),
                                                  ("decode.compile=false", "second")]
    for row in rows:
        assert float(row[2]) > 0 and float(row[3]) > 0
    assert [row[5] for row in rows[1:]] == ["10 / 10", "10 / 10"]  # the same eager search: the same hypotheses
