"""Attention maps of one sentence: every layer and head of encoder self-, decoder self- and cross-attention, with the
head kinds labelled, plus the pictures specific to each mechanism:

* mixed multi-head attention (MMA): encoder heads titled with their mask kind ``G``/``L``/``F``/``B``;
* Gaussian-mixture cross-attention (GMM): each component drawn over the source as its mean (dot) and width
  (``mu +- sigma`` bar), darker for a larger mixture weight ``omega``, one row per target token
  (:func:`plot_gmm_components`);
* multi-hop attention: the head-gate weight of each head as a bar (:func:`plot_head_gates`);
* multi-layer multi-head attention (MLMHA): the cross-attention over each encoder layer's output ``f_i``
  (:func:`plot_layer_weights`).

The data side is :func:`sentence_attention`, which cuts one sentence out of batched weights; every ``plot_*`` function
returns a matplotlib ``Figure`` (see :mod:`mma_nmt.analysis._figures`; save it with ``save_figure``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import torch

from mma_nmt.analysis._figures import label_axes, new_figure
from mma_nmt.ops.head_spec import format_head_spec, parse_head_spec

BLOCKS = ("encoder_self", "decoder_self", "cross")


@dataclass
class SentenceAttention:
    """Attention weights of one sentence, cut to its true lengths (S source, T target tokens)."""

    source_tokens: list[str]
    target_tokens: list[str]
    encoder_self: torch.Tensor | None = None  # (L_enc, H, S, S)
    decoder_self: torch.Tensor | None = None  # (L_dec, H, T, T)
    cross: torch.Tensor | None = None  # (L_dec, H, T, S)
    encoder_head_kinds: str | None = None  # e.g. "GGLLFFBB" (one letter per head); None: all global


def head_labels(kinds: str | Sequence[int] | None, num_heads: int) -> list[str]:
    """``("GLFB", 8)`` -> ``["0 G", "1 G", "2 L", "3 L", "4 F", "5 F", "6 B", "7 B"]``; ``None`` gives plain indices."""
    if kinds is None:
        return [str(h) for h in range(num_heads)]
    letters = format_head_spec(parse_head_spec(kinds, num_heads))
    return [f"{h} {letter}" for h, letter in enumerate(letters)]


def _stack_layers(value: torch.Tensor | Sequence[torch.Tensor]) -> torch.Tensor:
    """Per-layer list of (B, H, T, S) or a (B, L, H, T, S) tensor -> (B, L, H, T, S)."""
    if isinstance(value, torch.Tensor):
        if value.dim() != 5:
            raise ValueError(f"stacked weights must be (B, L, H, T, S), got {tuple(value.shape)}")
        return value
    return torch.stack(list(value), dim=1)


def sentence_attention(batch: Mapping[str, torch.Tensor | Sequence[torch.Tensor]], index: int, *,
                       source_tokens: Sequence[str], target_tokens: Sequence[str],
                       encoder_head_kinds: str | None = None) -> SentenceAttention:
    """Cuts sentence ``index`` out of batched weights.

    ``batch`` maps any of ``"encoder_self"``, ``"decoder_self"``, ``"cross"`` to a list of per-layer (B, H, T, S)
    tensors or a (B, L, H, T, S) tensor (padding at the end of each axis). Lengths come from the token lists.
    """
    unknown = set(batch) - set(BLOCKS)
    if unknown:
        raise ValueError(f"unknown attention blocks {sorted(unknown)}; expected some of {BLOCKS}")
    s, t = len(source_tokens), len(target_tokens)
    sizes = {"encoder_self": (s, s), "decoder_self": (t, t), "cross": (t, s)}
    cut = {}
    for name, value in batch.items():
        w = _stack_layers(value)[index]  # (L, H, T, S)
        rows, cols = sizes[name]
        if w.shape[-2] < rows or w.shape[-1] < cols:
            raise ValueError(f"{name} weights {tuple(w.shape)} are smaller than the sentence ({rows}, {cols})")
        cut[name] = w[..., :rows, :cols].detach().float().cpu()
    return SentenceAttention(source_tokens=list(source_tokens), target_tokens=list(target_tokens),
                             encoder_head_kinds=encoder_head_kinds, **cut)


def plot_attention_grid(weights: torch.Tensor, *, query_tokens: Sequence[str] | None = None,
                        key_tokens: Sequence[str] | None = None, head_names: Sequence[str] | None = None,
                        layer_names: Sequence[str] | None = None, title: str = "", cell: float = 2.2):
    """Grid of heatmaps, one row per layer and one column per head, of ``weights`` (L, H, T, S) or (H, T, S)."""
    w = weights.detach().float().cpu()
    w = w.unsqueeze(0) if w.dim() == 3 else w
    if w.dim() != 4:
        raise ValueError(f"weights must be (L, H, T, S) or (H, T, S), got {tuple(weights.shape)}")
    layers, heads = w.shape[:2]
    fig = new_figure(0.8 + cell * heads, 0.6 + cell * layers)
    axes = fig.subplots(layers, heads, squeeze=False)
    for layer in range(layers):
        for head in range(heads):
            ax = axes[layer][head]
            ax.imshow(w[layer, head].numpy(), cmap="viridis", vmin=0.0, vmax=max(float(w[layer, head].max()), 1e-9),
                      aspect="auto")
            label_axes(ax, rows=query_tokens if head == 0 else None, cols=key_tokens if layer == layers - 1 else None)
            name = head_names[head] if head_names is not None else str(head)
            layer_name = layer_names[layer] if layer_names is not None else f"layer {layer + 1}"
            ax.set_title(f"{layer_name}, head {name}", fontsize=7)
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


def plot_sentence_attention(maps: SentenceAttention, *, cell: float = 2.2) -> dict[str, object]:
    """One figure per attention block present: ``{"encoder_self": Figure, "decoder_self": ..., "cross": ...}``.

    Encoder heads are titled with their kind letter (``encoder_head_kinds``), decoder self-attention heads with ``C``
    (causal) and cross-attention heads with ``G`` (global).
    """
    src, tgt = maps.source_tokens, maps.target_tokens
    plan = {
        "encoder_self": (maps.encoder_self, src, src, maps.encoder_head_kinds, "Encoder self-attention"),
        "decoder_self": (maps.decoder_self, tgt, tgt, "C", "Decoder self-attention"),
        "cross": (maps.cross, tgt, src, "G", "Cross-attention (rows: target, columns: source)"),
    }
    figures = {}
    for name, (weights, rows, cols, kinds, title) in plan.items():
        if weights is None:
            continue
        names = head_labels(kinds, weights.shape[-3])
        figures[name] = plot_attention_grid(weights, query_tokens=rows, key_tokens=cols, head_names=names,
                                            title=title, cell=cell)
    return figures


def plot_gmm_components(omega: torch.Tensor, mu: torch.Tensor, sigma: torch.Tensor, *,
                        source_tokens: Sequence[str], target_tokens: Sequence[str],
                        gate: torch.Tensor | None = None, background: torch.Tensor | None = None, title: str = ""):
    """GMM cross-attention of one sentence and layer, one panel per head.

    Args:
        omega, mu, sigma: (H, T, K) mixture weights, means and standard deviations in source positions (0-based).
        gate: optional (H, T) gate ``g`` (weight of the mixture), written at the right of each row.
        background: optional (H, T, S) weights drawn faintly underneath (e.g. the total attention ``gamma``).
    """
    if not omega.shape == mu.shape == sigma.shape or omega.dim() != 3:
        raise ValueError(f"omega, mu, sigma must all be (H, T, K); got {tuple(omega.shape)}, {tuple(mu.shape)}, "
                         f"{tuple(sigma.shape)}")
    heads, steps, components = omega.shape
    fig = new_figure(1.0 + 3.2 * heads, 1.2 + 0.28 * steps)
    axes = fig.subplots(1, heads, squeeze=False)[0]
    colours = [f"C{k}" for k in range(components)]
    for h, ax in enumerate(axes):
        if background is not None:
            ax.imshow(background[h].detach().float().cpu().numpy(), cmap="Greys", alpha=0.35, aspect="auto",
                      extent=(-0.5, len(source_tokens) - 0.5, steps - 0.5, -0.5))
        for t in range(steps):
            for k in range(components):
                weight = float(omega[h, t, k])
                centre, width = float(mu[h, t, k]), float(sigma[h, t, k])
                alpha = 0.15 + 0.85 * min(max(weight, 0.0), 1.0)
                ax.plot([centre - width, centre + width], [t, t], color=colours[k], alpha=alpha, linewidth=2)
                ax.plot([centre], [t], "o", color=colours[k], alpha=alpha, markersize=3)
            if gate is not None:
                ax.text(len(source_tokens) - 0.4, t, f"g={float(gate[h, t]):.2f}", fontsize=5, va="center")
        ax.set_xlim(-0.5, len(source_tokens) + 1.5)
        ax.set_ylim(steps - 0.5, -0.5)
        label_axes(ax, rows=target_tokens if h == 0 else None, cols=source_tokens)
        ax.set_title(f"head {h}: components mean +- sigma", fontsize=8)
    fig.suptitle(title or f"Gaussian-mixture components (K={components}; colour = component, shade = weight)",
                 fontsize=10)
    return fig


def plot_head_gates(gate: torch.Tensor, *, head_names: Sequence[str] | None = None, title: str = ""):
    """Multi-hop head gate: bar of the mean weight of each head, error bar one standard deviation over positions.

    ``gate`` is (H,) or (H, N) (N positions, e.g. the (H, T) gate of one sentence or several sentences concatenated).
    Heads are numbered from 1 unless ``head_names`` names them, as the analysis tables number them.
    """
    g = gate.detach().double().cpu()
    g = g.unsqueeze(1) if g.dim() == 1 else g.reshape(g.shape[0], -1)
    heads = g.shape[0]
    names = list(head_names) if head_names is not None else [str(h + 1) for h in range(heads)]
    fig = new_figure(1.5 + 0.6 * heads, 3.0)
    ax = fig.subplots()
    std = g.std(dim=1) if g.shape[1] > 1 else torch.zeros(heads, dtype=torch.float64)
    ax.bar(names, g.mean(dim=1).numpy(), yerr=std.numpy(), capsize=3, color="tab:purple")
    ax.axhline(1.0 / heads, color="grey", linestyle=":", linewidth=0.8, label="uniform 1/H")
    ax.set_xlabel("head")
    ax.set_ylabel("head-gate weight")
    ax.set_title(title or f"Multi-hop head gate (mean over {g.shape[1]} positions)", fontsize=10)
    ax.legend(fontsize=7)
    return fig


def plot_layer_weights(weights: torch.Tensor, *, source_tokens: Sequence[str], target_tokens: Sequence[str],
                       layer_indices: Sequence[int] | None = None, title: str = ""):
    """MLMHA cross-attention of one decoder layer over each collected encoder output ``f_i``.

    ``weights`` is (N, H, T, S): for layer-specific weights (U0 = 1) one map per encoder layer read; for joint weights
    (U0 = 0) pass the single shared map as (1, H, T, S). ``layer_indices`` are the 1-based encoder layers
    (default 1..N).
    """
    n = weights.shape[0]
    indices = list(layer_indices) if layer_indices is not None else list(range(1, n + 1))
    names = [f"f_{i}" for i in indices] if n > 1 else ["joint"]
    return plot_attention_grid(weights, query_tokens=target_tokens, key_tokens=source_tokens, layer_names=names,
                               title=title or "Multi-layer cross-attention: one row per encoder layer output")
