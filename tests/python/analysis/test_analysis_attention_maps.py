"""Attention maps: cutting a sentence out of a batch, head labels, and every plot rendering to PNG without a display."""

from __future__ import annotations

import pytest
import torch

from mma_nmt.analysis import (head_labels, plot_attention_grid, plot_gmm_components, plot_head_gates,
                              plot_layer_weights, plot_sentence_attention, save_figure, sentence_attention)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_head_labels_name_each_head_kind():
    assert head_labels("GLFB", 8) == ["0 G", "1 G", "2 L", "3 L", "4 F", "5 F", "6 B", "7 B"]
    assert head_labels(None, 2) == ["0", "1"]


def test_sentence_attention_cuts_padding_from_per_layer_lists_and_stacked_tensors():
    batch, heads, s_max, t_max = 2, 4, 7, 5
    enc = [torch.rand(batch, heads, s_max, s_max) for _ in range(3)]  # 3 encoder layers as a list
    cross = torch.rand(batch, 2, heads, t_max, s_max)  # 2 decoder layers stacked (B, L, H, T, S)
    maps = sentence_attention({"encoder_self": enc, "cross": cross}, 1, source_tokens=list("abcd"),
                              target_tokens=list("xyz"), encoder_head_kinds="GLFB")
    assert maps.encoder_self.shape == (3, heads, 4, 4)
    assert maps.cross.shape == (2, heads, 3, 4)
    assert maps.decoder_self is None
    torch.testing.assert_close(maps.cross[1, 2], cross[1, 1, 2, :3, :4])
    torch.testing.assert_close(maps.encoder_self[0], enc[0][1, :, :4, :4])
    with pytest.raises(ValueError, match="unknown attention blocks"):
        sentence_attention({"encoder": enc}, 0, source_tokens=["a"], target_tokens=["b"])


def test_every_block_of_a_sentence_renders_to_png(tmp_path):
    src, tgt = ["Ein", "Hund", "läuft", "."], ["A", "dog", "runs", ".", "</s>"]
    maps = sentence_attention({
        "encoder_self": torch.softmax(torch.randn(1, 2, 4, 4, 4), -1),
        "decoder_self": torch.softmax(torch.randn(1, 2, 4, 5, 5), -1),
        "cross": torch.softmax(torch.randn(1, 2, 4, 5, 4), -1),
    }, 0, source_tokens=src, target_tokens=tgt, encoder_head_kinds="GLFB")
    figures = plot_sentence_attention(maps)
    assert sorted(figures) == ["cross", "decoder_self", "encoder_self"]
    titles = [ax.get_title() for ax in figures["encoder_self"].axes]
    assert "layer 1, head 1 L" in titles and "layer 2, head 3 B" in titles
    for name, fig in figures.items():
        assert save_figure(fig, tmp_path / f"{name}.png").read_bytes()[:8] == PNG_MAGIC


def test_mechanism_specific_plots_render_to_png(tmp_path):
    heads, steps, components, source = 2, 3, 4, 6
    mu = torch.rand(heads, steps, components) * source
    figures = {
        "gmm": plot_gmm_components(torch.softmax(torch.randn(heads, steps, components), -1), mu,
                                   torch.rand(heads, steps, components) + 0.2, source_tokens=list("abcdef"),
                                   target_tokens=list("xyz"), gate=torch.rand(heads, steps),
                                   background=torch.softmax(torch.randn(heads, steps, source), -1)),
        "gates": plot_head_gates(torch.softmax(torch.randn(8, 10), dim=0)),
        "layers": plot_layer_weights(torch.softmax(torch.randn(3, 2, 3, 6), -1), source_tokens=list("abcdef"),
                                     target_tokens=list("xyz")),
        "grid": plot_attention_grid(torch.rand(2, 5, 5)),
    }
    for name, fig in figures.items():
        assert save_figure(fig, tmp_path / f"{name}.png").read_bytes()[:8] == PNG_MAGIC


def test_gmm_plot_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match=r"\(H, T, K\)"):
        plot_gmm_components(torch.rand(2, 3, 4), torch.rand(2, 3, 4), torch.rand(2, 3, 5), source_tokens=["a"],
                            target_tokens=["b"])


def test_plots_never_touch_pyplot_or_a_display(tmp_path):
    """In a fresh interpreter without DISPLAY, plotting and saving never imports pyplot (so no GUI backend is chosen)."""
    import os
    import subprocess
    import sys

    script = (
        "import sys, torch\n"
        "from mma_nmt.analysis import plot_attention_grid, save_figure\n"
        f"save_figure(plot_attention_grid(torch.rand(2, 3, 4)), {str(tmp_path / 'grid.png')!r})\n"
        "assert 'matplotlib.pyplot' not in sys.modules, 'pyplot was imported'\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "MPLBACKEND")}
    subprocess.run([sys.executable, "-c", script], check=True, env=env, timeout=120)
    assert (tmp_path / "grid.png").read_bytes()[:8] == PNG_MAGIC
