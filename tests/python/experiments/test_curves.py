"""The learning-curve figure of a table: its loss axis shows where the systems differ, not the steep start."""

from __future__ import annotations

import pytest

from mma_nmt.experiments.curves import loss_axis_range, plot_learning_curves


def test_the_loss_axis_starts_after_the_first_fifth_of_the_longest_run():
    long = ([200, 400, 600, 800, 1000], [4.0, 3.0, 2.0, 1.6, 1.5])
    short = ([200, 400], [4.5, 2.5])  # stopped before the cut at 200: its last loss counts
    bottom, top = loss_axis_range([long, short], skipped_share=0.5)  # cut at update 500: the long run's 2.0
    assert top == pytest.approx(2.5 + 0.05 * 1.0) and bottom == pytest.approx(1.5 - 0.05 * 1.0)
    assert loss_axis_range([long], skipped_share=0.0) == pytest.approx((1.5 - 0.125, 4.0 + 0.125))
    flat = loss_axis_range([([200, 400], [1.0, 1.0])])
    assert flat == pytest.approx((0.99, 1.01))
    with pytest.raises(ValueError, match="non-empty curve"):
        loss_axis_range([([], [])])


def test_the_figure_is_written_with_every_run_and_skips_a_table_without_curves(tmp_path):
    def run(row, seed, losses):
        return {"row": row, "column": "de_en", "seed": seed, "stopping": {"best_update": 200 * len(losses)},
                "curve": [{"step": 200 * (i + 1), "valid_nll": loss} for i, loss in enumerate(losses)]}

    data = {"title": "A table", "columns": {"de_en": "Multi30k De-En (for IWSLT14 De-En)"},
            "rows": [{"system": "baseline", "label": "Transformer"}, {"system": "mma", "label": "MMA"}],
            "runs": [run("baseline", 1, [4.0, 2.0, 1.7]), run("mma", 1, [4.0, 1.9, 1.6, 1.55])]}
    path = plot_learning_curves(data, tmp_path / "main.curves.png")
    assert path.stat().st_size > 1000 and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert plot_learning_curves({**data, "runs": [{**r, "curve": []} for r in data["runs"]]},
                                tmp_path / "none.png") is None
    assert not (tmp_path / "none.png").exists()


def test_a_long_legend_does_not_squeeze_the_panels():
    """A legend of long system labels (the LSTM recipe probe's) used to sit in the panel and shrink it to a sliver."""
    from mma_nmt.experiments.curves import draw_learning_curves

    long_label = "the paper's optimisation: SGD lr 0.1 on the sentence-normalised loss, uniform initialisation, " * 2
    rows = [{"system": f"s{i}", "label": f"{i}: {long_label}"} for i in range(6)]
    runs = [{"row": f"s{i}", "column": "de_en", "seed": 1, "stopping": {},
             "curve": [{"step": 200 * (k + 1), "valid_nll": 4.0 - k * 0.1 * (i + 1)} for k in range(5)]}
            for i in range(6)]
    figure = draw_learning_curves({"title": "Probe", "columns": {"de_en": "Multi30k De-En"}, "rows": rows,
                                   "runs": runs})
    figure.canvas.draw()
    (ax,) = figure.axes
    box = ax.get_position()  # figure fractions, after the layout
    assert box.width > 0.6 and box.height > 0.3
    legend = figure.legends[0].get_window_extent()
    assert legend.y1 <= ax.get_window_extent().y0  # below the panel, not on it
    assert len(figure.legends[0].get_texts()) == 6
