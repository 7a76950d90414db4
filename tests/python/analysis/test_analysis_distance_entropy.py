"""MLMHA eqs. 13-16 on hand-built attention: every expected value is worked out by hand in the comments."""

from __future__ import annotations

import math

import pytest
import torch

from mma_nmt.analysis import (attention_distance, attention_entropy, head_distance_entropy, plot_distance_entropy,
                              plot_layer_profiles, shared_colour_limits)
from mma_nmt.analysis import save_figure

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def uniform(n: int) -> torch.Tensor:
    return torch.full((1, 1, n, n), 1.0 / n, dtype=torch.float64)  # (L=1, H=1, T=n, S=n)


def shifted_diagonal(n: int, shift: int) -> torch.Tensor:
    """Query i attends to key i - shift when it exists, else to key 0."""
    w = torch.zeros(n, n)
    for i in range(n):
        w[i, max(i - shift, 0)] = 1.0
    return w


@pytest.mark.parametrize("n", [1, 3, 7, 20])
def test_entropy_of_uniform_rows_is_log_n(n):
    result = head_distance_entropy([uniform(n)])
    assert result.entropy.shape == (1, 1)
    assert result.entropy.item() == pytest.approx(math.log(n), abs=1e-12)


def test_entropy_of_one_hot_row_is_zero_and_of_half_half_is_log_2():
    rows = torch.tensor([[0.0, 1.0, 0.0], [0.5, 0.0, 0.5]])
    assert attention_entropy(rows).tolist() == pytest.approx([0.0, math.log(2)], abs=1e-12)


def test_distance_of_diagonal_is_zero():
    result = head_distance_entropy([torch.eye(6).view(1, 1, 6, 6), torch.eye(2).view(1, 1, 2, 2)])
    assert result.distance.item() == 0.0
    assert result.entropy.item() == 0.0
    assert (result.tokens, result.sentences) == (8, 2)


def test_distance_of_shifted_diagonal():
    # n = 5, shift 1: rows 1..4 sit one token away, row 0 on itself -> (0 + 1 + 1 + 1 + 1) / 5 = 0.8
    result = head_distance_entropy([shifted_diagonal(5, 1).view(1, 5, 5)])
    assert result.distance.item() == pytest.approx(0.8)
    # shift 2 with n = 4: rows 0, 1 -> key 0 (distances 0, 1); rows 2, 3 -> distance 2 each -> 5 / 4
    result = head_distance_entropy([shifted_diagonal(4, 2).view(1, 4, 4)])
    assert result.distance.item() == pytest.approx(1.25)


def test_distance_is_token_weighted_over_the_corpus_not_a_mean_of_sentence_means():
    # sentence A: uniform 2x2, each row expects distance 0.5 -> sum 1.0 over 2 tokens
    # sentence B: diagonal 3x3 -> sum 0 over 3 tokens. Eq. 13: 1.0 / 5 = 0.2 (mean of sentence means would be 0.25)
    result = head_distance_entropy([uniform(2), torch.eye(3).view(1, 1, 3, 3)])
    assert result.distance.item() == pytest.approx(0.2)
    # entropy: A rows log 2 each, B rows 0 -> 2 log 2 / 5
    assert result.entropy.item() == pytest.approx(2 * math.log(2) / 5)


def test_per_head_and_per_layer_means():
    n = 4
    layer1 = torch.stack([torch.eye(n), torch.full((n, n), 1.0 / n)])  # head 0 diagonal, head 1 uniform
    layer2 = torch.stack([shifted_diagonal(n, 1), torch.eye(n)])
    result = head_distance_entropy([torch.stack([layer1, layer2])])  # (L=2, H=2, 4, 4)
    # uniform 4x4: row distances (0+1+2+3)/4 = 1.5, (1+0+1+2)/4 = 1, 1, 1.5 -> mean 1.25
    # shifted diagonal 4x4: (0 + 1 + 1 + 1) / 4 = 0.75
    expected_distance = torch.tensor([[0.0, 1.25], [0.75, 0.0]], dtype=torch.float64)
    expected_entropy = torch.tensor([[0.0, math.log(4)], [0.0, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(result.distance, expected_distance)
    torch.testing.assert_close(result.entropy, expected_entropy)
    torch.testing.assert_close(result.layer_distance, torch.tensor([0.625, 0.375], dtype=torch.float64))  # eq. 14
    torch.testing.assert_close(result.layer_entropy, torch.tensor([math.log(4) / 2, 0.0], dtype=torch.float64))


def test_past_only_reproduces_the_printed_equations():
    # uniform 3x3 (1/3 each), keys j <= i only, distance i - j:
    # numerator 0 + 1/3 * 1 + 1/3 * (2 + 1) = 4/3; denominator 1/3 + 2/3 + 1 = 2 -> 2/3
    # entropy rows: log3/3, 2 log3/3, log3 -> mean over 3 tokens = 2 log 3 / 3
    result = head_distance_entropy([uniform(3)], past_only=True)
    assert result.distance.item() == pytest.approx(2 / 3)
    assert result.entropy.item() == pytest.approx(2 * math.log(3) / 3)
    # all keys, |i - j|: rows 1, 2/3, 1 -> 8/9
    assert head_distance_entropy([uniform(3)]).distance.item() == pytest.approx(8 / 9)


def test_row_distance_with_query_offset():
    # one query at key position 3 of a 4-key cache, weights 0.5 on keys 0 and 3 -> 0.5 * 3 = 1.5
    w = torch.tensor([[0.5, 0.0, 0.0, 0.5]])
    assert attention_distance(w, query_offset=3).item() == pytest.approx(1.5)


def test_rejects_wrong_shapes_and_empty_input():
    with pytest.raises(ValueError, match="per sentence"):
        head_distance_entropy([torch.ones(4, 4)])
    with pytest.raises(ValueError, match="at least one sentence"):
        head_distance_entropy([])
    with pytest.raises(ValueError, match="earlier ones"):
        head_distance_entropy([torch.ones(1, 2, 3, 3), torch.ones(1, 3, 3, 3)])


def test_plot_renders_png_without_display(tmp_path):
    result = head_distance_entropy([torch.softmax(torch.randn(2, 4, 6, 6), dim=-1)])
    path = save_figure(plot_distance_entropy(result, head_labels=list("GLFB")), tmp_path / "dist.png")
    assert path.read_bytes()[:8] == PNG_MAGIC


def test_two_models_compared_share_one_colour_scale():
    """Each model's figure used to span its own values, so one colour meant different values in the two figures."""
    sharp = head_distance_entropy([torch.softmax(4 * torch.randn(2, 4, 6, 6), dim=-1)])
    flat = head_distance_entropy([torch.full((2, 4, 6, 6), 1 / 6)])
    limits = shared_colour_limits([sharp, flat])
    assert limits["entropy"] == (pytest.approx(float(sharp.entropy.min())), pytest.approx(float(flat.entropy.max())))
    scales = []
    for result in (sharp, flat):
        figure = plot_distance_entropy(result, limits=limits)
        scales.append([image.get_clim() for ax in figure.axes for image in ax.get_images()])
    assert scales[0] == scales[1] == [limits["distance"], limits["entropy"]]
    alone = [image.get_clim() for ax in plot_distance_entropy(flat).axes for image in ax.get_images()]
    assert alone[1] != limits["entropy"]  # without shared limits the flat model's scale is its own
    with pytest.raises(ValueError, match="at least one result"):
        shared_colour_limits([])


def test_layer_profiles_draw_one_line_per_model_and_one_colour_per_system(tmp_path):
    profiles = {"baseline": [("seed 1", [3.5, 2.8, 4.2], [2.0, 1.7, 1.9]), ("seed 2", [3.3, 3.1, 5.3], [1.9, 1.8, 2.2])],
                "m10": [("seed 1", [4.1, 3.9, 5.2], [2.2, 2.1, 2.0])]}
    fig = plot_layer_profiles(profiles, title="t")
    distance_axis, entropy_axis = fig.axes[:2]
    for axis, column in ((distance_axis, 1), (entropy_axis, 2)):
        lines = axis.get_lines()
        assert [line.get_label() for line in lines] == ["baseline seed 1", "baseline seed 2", "m10 seed 1"]
        assert [list(line.get_xdata()) for line in lines] == [[1, 2, 3]] * 3
        assert [list(line.get_ydata()) for line in lines] == [model[column] for models in profiles.values()
                                                              for model in models]
        colours = [line.get_color() for line in lines]
        assert colours[0] == colours[1] != colours[2]
    assert save_figure(fig, tmp_path / "profiles.png").read_bytes()[:8] == PNG_MAGIC


def test_layer_profiles_refuse_a_model_whose_distances_and_entropies_differ_in_length():
    with pytest.raises(ValueError, match="m10 seed 2: 3 layer distances but 2 entropies"):
        plot_layer_profiles({"m10": [("seed 2", [1.0, 2.0, 3.0], [2.0, 2.1])]})
