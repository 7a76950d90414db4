"""``python -m benchmarks.cuda_batch_shapes`` on the CPU, eager: the loop a GPU lease runs under reduce-overhead."""

from __future__ import annotations

from benchmarks.cuda_batch_shapes import main
from nmt_fixtures import tiny_data  # noqa: F401  (fixture)


def test_both_passes_run_and_the_table_has_a_row_per_multiple(tiny_data):  # noqa: F811
    report = main([str(tiny_data), "--model", "transformer_tiny MMA", "--device", "cpu", "--compile", "false",
                   "--precision", "float32", "--steps", "3", "--multiples", "1", "4", "--max-tokens", "200"])
    rows = [line.strip("| ").split(" | ") for line in report.splitlines()[4:]]
    assert [row[0] for row in rows] == ["1", "4"]
    for row in rows:
        steps, shapes = int(row[1]), int(row[2])
        assert steps == 3 and 1 <= shapes <= steps
        assert float(row[4]) >= float(row[5]) > 0  # the first-shape steps are part of the first pass
        assert float(row[6]) > 0 and float(row[7]) > 0 and float(row[8]) > 0
