"""Per-head response by relative source position (s - t) on hand-built cross-attention."""

from __future__ import annotations

import math

import pytest
import torch

from mma_nmt.analysis import (head_divergence, plot_relative_position_panels, plot_relative_position_response,
                              relative_position_response, save_figure)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def looks_ahead(target_len: int, source_len: int, shift: int) -> torch.Tensor:
    """(T, S) one-hot at s = clamp(t + shift, 0, S - 1)."""
    w = torch.zeros(target_len, source_len)
    for t in range(target_len):
        w[t, min(max(t + shift, 0), source_len - 1)] = 1.0
    return w


def test_shifted_diagonal_peaks_at_the_shift():
    # head 0 looks 2 ahead, head 1 one behind (row 0 clamps to s = 0), head 2 on the diagonal
    heads = torch.stack([looks_ahead(4, 7, 2), looks_ahead(4, 7, -1), looks_ahead(4, 7, 0)])  # (3, 4, 7)
    result = relative_position_response([heads])
    assert result.peak_offsets().tolist() == [2, -1, 0]
    at = {int(r): i for i, r in enumerate(result.offsets)}
    assert result.response[0, at[2]].item() == 4.0  # all 4 target steps
    assert result.response[1, at[-1]].item() == 3.0 and result.response[1, at[0]].item() == 1.0


def test_sums_add_over_sentences_and_count_pairs():
    # uniform 2x3 (1/3 each): offsets -1: (1,0); 0: (0,0),(1,1); 1: (0,1),(1,2); 2: (0,2)
    w = torch.full((1, 2, 3), 1.0 / 3)
    result = relative_position_response([w, w])
    assert result.offsets.tolist() == [-2, -1, 0, 1, 2]
    assert result.pairs.tolist() == [0, 2, 4, 4, 2]
    torch.testing.assert_close(result.response[0], torch.tensor([0, 2 / 3, 4 / 3, 4 / 3, 2 / 3], dtype=torch.float64))
    torch.testing.assert_close(result.mean_per_pair()[0], torch.tensor([0, 1 / 3, 1 / 3, 1 / 3, 1 / 3],
                                                                       dtype=torch.float64))
    assert result.normalized()[0].sum().item() == pytest.approx(1.0)
    assert result.sentences == 2


def test_max_offset_drops_far_weights():
    result = relative_position_response([looks_ahead(3, 9, 5).unsqueeze(0)], max_offset=2)
    assert result.offsets.tolist() == [-2, -1, 0, 1, 2]
    assert result.response.sum().item() == 0.0  # every weight sits at offset 5


def test_rejects_bad_input():
    with pytest.raises(ValueError, match=r"\(H, T, S\)"):
        relative_position_response([torch.ones(3, 3)])
    with pytest.raises(ValueError, match="at least one sentence"):
        relative_position_response([])


def test_plot_renders_png_without_display(tmp_path):
    result = relative_position_response([torch.softmax(torch.randn(4, 5, 6), dim=-1)])
    path = save_figure(plot_relative_position_response(result), tmp_path / "rel.png")
    assert path.read_bytes()[:8] == PNG_MAGIC


def test_panels_render_several_models_side_by_side(tmp_path):
    results = {f"seed {k}": relative_position_response([torch.softmax(torch.randn(4, 5, 6), dim=-1)])
               for k in (1, 2)}
    figure = plot_relative_position_panels(results, title="two models")
    assert [ax.get_title() for ax in figure.axes] == ["seed 1", "seed 2"]
    assert save_figure(figure, tmp_path / "panels.png").read_bytes()[:8] == PNG_MAGIC
    with pytest.raises(ValueError, match="at least one"):
        plot_relative_position_panels({})


def test_head_divergence_is_zero_for_equal_heads_and_one_for_disjoint_heads():
    same = torch.stack([looks_ahead(4, 7, 1)] * 3)
    assert head_divergence(relative_position_response([same])) == pytest.approx(0.0)
    apart = torch.stack([looks_ahead(4, 7, 2), looks_ahead(4, 7, -2)])  # 2 ahead vs 2 behind (rows 0-1 clamp to 0)
    result = relative_position_response([apart])
    # head 1 puts 2 of its 4 steps at offset -2 and 1 each at -1 and 0 (clamped rows): no overlap with head 0's +2
    assert head_divergence(result) == pytest.approx(1.0)
    # half of one head's mass moved: total variation 1/2
    half = torch.stack([looks_ahead(2, 5, 0), torch.stack([looks_ahead(1, 5, 0)[0], looks_ahead(2, 5, 2)[1]])])
    assert head_divergence(relative_position_response([half])) == pytest.approx(0.5)
    assert math.isnan(head_divergence(relative_position_response([same[:1]])))  # one head: no pair to compare


def test_matches_a_plain_loop_over_every_pair():
    ws = [torch.rand(3, t, s) for t, s in ((1, 1), (4, 2), (2, 6), (5, 5), (7, 3))]
    expected: dict[int, torch.Tensor] = {}
    for w in ws:
        for t in range(w.shape[1]):
            for s in range(w.shape[2]):
                expected[s - t] = expected.get(s - t, torch.zeros(3, dtype=torch.float64)) + w[:, t, s].double()
    result = relative_position_response(ws)
    assert result.offsets.tolist() == list(range(-6, 7))  # symmetric: T - 1 = 6 behind; ahead at most S - 1 = 5
    for column, offset in enumerate(result.offsets.tolist()):
        torch.testing.assert_close(result.response[:, column],
                                   expected.get(offset, torch.zeros(3, dtype=torch.float64)))
