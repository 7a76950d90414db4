"""BLEU by source-length bucket and the layer-masking table."""

from __future__ import annotations

import pytest

from mma_nmt.analysis import (bleu_by_source_length, format_layer_masking_table, layer_masking_table,
                              plot_bleu_by_source_length, save_figure)
from mma_nmt.analysis.buckets import assign_buckets, bucket_edges_labels

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_paper_buckets_are_half_open_on_the_left():
    labels = [label for label, _, _ in bucket_edges_labels((10, 20, 30, 40, 50))]
    assert labels == ["(0, 10]", "(10, 20]", "(20, 30]", "(30, 40]", "(40, 50]", "(50, inf)"]
    assert assign_buckets([1, 10, 11, 20, 50, 51, 300]) == [0, 0, 1, 1, 4, 5, 5]
    with pytest.raises(ValueError, match="increasing"):
        bucket_edges_labels((10, 5))


def test_bleu_by_source_length_scores_each_bucket_on_its_own():
    sources = ["a b", "a b c", "w " * 15, "x " * 60]
    references = ["the small dog runs home", "a red car is parked here", "two men play chess in a park",
                  "the sun sets over the calm sea"]
    hypotheses = [references[0], references[1], "zzz yyy xxx www vvv", references[3]]
    rows = bleu_by_source_length(sources, hypotheses, references)
    assert [r.sentences for r in rows] == [2, 1, 0, 0, 0, 1]
    assert rows[0].bleu == pytest.approx(100.0) and rows[5].bleu == pytest.approx(100.0)
    assert rows[1].bleu == pytest.approx(0.0)
    assert rows[2].bleu is None


def test_layer_masking_table_reports_differences_to_the_full_model():
    references = ["a man rides a bike down the road", "two dogs play in the snow together"]
    outputs = {None: references, 1: ["x y z", "u v w"], 2: references}
    calls = []

    def translate(masked_layer):
        calls.append(masked_layer)
        return outputs[masked_layer]

    rows = layer_masking_table(translate, references, num_layers=2)
    assert calls == [None, 1, 2]
    assert [r.masked_layer for r in rows] == [None, 1, 2]
    assert [round(r.delta, 6) for r in rows] == [0.0, -100.0, 0.0]
    table = format_layer_masking_table(rows)
    assert "| 1 | 0.00 | -100.00 |" in table and "none (full model)" in table


def test_layer_masking_table_checks_hypothesis_count():
    with pytest.raises(ValueError, match="hypotheses for 2 references"):
        layer_masking_table(lambda layer: ["only one"], ["a", "b"], num_layers=1)


def test_bleu_by_length_plot_renders_png(tmp_path):
    rows = bleu_by_source_length(["a b", "c " * 30], ["a cat", "the dog"], ["a cat", "a dog"])
    fig = plot_bleu_by_source_length({"baseline": rows, "gmm": rows})
    assert save_figure(fig, tmp_path / "bleu.png").read_bytes()[:8] == PNG_MAGIC
