"""GMM paper analyses: gate distribution, entropy by source length, n-gram precision gap (hand-computed values)."""

from __future__ import annotations

import math

import pytest
import torch

from mma_nmt.analysis import (entropy_by_source_length, gate_distribution, ngram_precision_gap, ngram_precisions,
                              plot_entropy_by_source_length, plot_gate_distribution, plot_ngram_precision_gap,
                              save_figure)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_gate_distribution_collects_values_per_layer_and_skips_nan():
    a = torch.tensor([[[0.1, 0.3]], [[0.9, float("nan")]]])  # (L=2, H=1, T=2); layer 2 has one NaN
    b = torch.tensor([[[0.2]], [[0.7]]])  # (2, 1, 1)
    result = gate_distribution([a, b])
    assert [v.numel() for v in result.per_layer] == [3, 2]
    torch.testing.assert_close(result.means, torch.tensor([0.2, 0.8], dtype=torch.float64))
    hist = result.histogram(bins=2)  # [0, 0.5) and [0.5, 1]: layer 1 all low, layer 2 all high
    torch.testing.assert_close(hist, torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64))


def test_entropy_by_source_length_buckets_and_renormalises_the_mixture():
    buckets = ((1, 2), (3, 4), (5, None))
    short = {  # S = 2: dot uniform -> log 2; mixture [0.2, 0.2] renormalised -> log 2; total one-hot -> 0
        "dot": torch.full((1, 1, 3, 2), 0.5),
        "mixture": torch.full((1, 1, 3, 2), 0.2),
        "total": torch.tensor([[1.0, 0.0]]).expand(1, 1, 3, 2),
    }
    long = {  # S = 6: dot uniform -> log 6 (one row); mixture one-hot -> 0; total uniform over 3 -> log 3
        "dot": torch.full((1, 1, 1, 6), 1 / 6),
        "mixture": torch.tensor([[[[0.0, 0.9, 0.0, 0.0, 0.0, 0.0]]]]),
        "total": torch.tensor([[[[1 / 3, 1 / 3, 1 / 3, 0.0, 0.0, 0.0]]]]),
    }
    result = entropy_by_source_length([short, long], buckets=buckets)
    assert result.buckets == ["[1, 2]", "[3, 4]", "[5, inf)"]
    assert result.sentences_per_bucket == [1, 0, 1]
    assert result.by_bucket["dot"][0] == pytest.approx(math.log(2))
    assert math.isnan(result.by_bucket["dot"][1])
    assert result.by_bucket["dot"][2] == pytest.approx(math.log(6))
    assert result.by_bucket["mixture"][0] == pytest.approx(math.log(2))
    assert result.by_bucket["total"][2] == pytest.approx(math.log(3))
    # "All" averages rows, not buckets: dot = (3 log 2 + log 6) / 4
    assert result.overall["dot"] == pytest.approx((3 * math.log(2) + math.log(6)) / 4)
    assert "| dot |" in result.table()


def test_entropy_by_source_length_uses_given_lengths():
    sample = {"dot": torch.full((1, 1, 1, 2), 0.5)}
    result = entropy_by_source_length([sample], source_lengths=[30])  # paper buckets: 30 is in [21, 40]
    assert result.sentences_per_bucket == [0, 1, 0]


def test_ngram_precisions_by_hand():
    hyp, ref = "the cat sat on the mat", "the cat is on the mat"
    # 1-grams: the x2, cat, on, mat match -> 5/6; 2-grams: "the cat", "on the", "the mat" -> 3/5
    # 3-grams: "on the mat" -> 1/4; 4-grams: none -> 0/3
    result = ngram_precisions([hyp], [ref])
    assert result.matches == [5, 3, 1, 0] and result.totals == [6, 5, 4, 3]
    assert result.precision == pytest.approx([500 / 6, 60.0, 25.0, 0.0])


def test_ngram_precision_is_clipped_by_reference_counts():
    # "the" occurs 3 times in the hypothesis but once in the reference -> 1/3
    assert ngram_precisions(["the the the"], ["the cat"], max_n=1).precision == pytest.approx([100 / 3])


def test_ngram_precision_gap_against_a_baseline():
    refs = ["the cat is on the mat"]
    gap = ngram_precision_gap(refs, ["the cat sat on the mat"], refs)  # system = reference: 100 each
    assert gap == pytest.approx({1: 100 - 500 / 6, 2: 40.0, 3: 75.0, 4: 100.0})
    assert list(ngram_precision_gap(refs, refs, refs, max_n=6)) == [1, 2, 3, 4, 5, 6]


def test_gmm_plots_render_png_without_display(tmp_path):
    gates = gate_distribution([torch.rand(6, 4, 9) for _ in range(3)])
    entropy = entropy_by_source_length([{"dot": torch.softmax(torch.randn(2, 4, 5, 25), -1),
                                         "total": torch.softmax(torch.randn(2, 4, 5, 25), -1)}])
    figures = {"violin": plot_gate_distribution(gates), "hist": plot_gate_distribution(gates, kind="hist"),
               "entropy": plot_entropy_by_source_length(entropy),
               "gap": plot_ngram_precision_gap({1: 0.5, 2: -0.2, 3: 1.0, 4: 0.1})}
    for name, fig in figures.items():
        assert save_figure(fig, tmp_path / f"{name}.png").read_bytes()[:8] == PNG_MAGIC
