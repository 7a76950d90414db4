"""Mean attention distance and attention entropy per head and layer (MLMHA paper, section 7.3, eqs. 13-16).

For a head ``h`` of layer ``l`` and weights ``w[i, j]`` from query token ``i`` to key token ``j``:

* eq. 13, mean distance: ``D[l, h] = sum_x sum_i sum_j w[i, j] * |i - j|  /  sum_x sum_i sum_j w[i, j]`` over every
  sentence ``x`` of the corpus sample (a token-weighted average, not a mean of per-sentence means);
* eq. 14, layer distance: ``D[l] = mean_h D[l, h]``;
* eq. 15, entropy of one query row: ``E[l, h](x_i) = -sum_j w[i, j] log w[i, j]`` (``0 log 0 = 0``), averaged over every
  query token of the sample to give ``E[l, h]``;
* eq. 16, layer entropy: ``E[l] = mean_h E[l, h]``.

The equations as printed sum over ``j <= i`` only, with distance ``i - j``: they come from Vig & Belinkov's study of a
left-to-right language model, where those are the only visible keys. For a bidirectional encoder this library sums over
every key and uses ``|i - j|`` by default; ``past_only=True`` reproduces the printed formula (restricted rows are not
renormalised, exactly as printed).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

import torch

from mma_nmt.analysis._figures import new_figure


def attention_entropy(weights: torch.Tensor) -> torch.Tensor:
    """Entropy in nats of each row of ``weights`` (..., S), with ``0 log 0 = 0``; returns (...)."""
    w = weights.double()
    return -(torch.xlogy(w, w)).sum(dim=-1)


def distance_matrix(query_len: int, key_len: int, *, query_offset: int = 0) -> torch.Tensor:
    """(T, S) float64 ``|i - j|`` with query ``i`` at key position ``i + query_offset``."""
    i = torch.arange(query_len, dtype=torch.float64).view(-1, 1) + query_offset
    j = torch.arange(key_len, dtype=torch.float64).view(1, -1)
    return (i - j).abs()


def attention_distance(weights: torch.Tensor, *, query_offset: int = 0) -> torch.Tensor:
    """Expected distance ``sum_j w[i, j] |i - j|`` of each query row of ``weights`` (..., T, S); returns (..., T)."""
    dist = distance_matrix(weights.shape[-2], weights.shape[-1], query_offset=query_offset)
    return (weights.double() * dist).sum(dim=-1)


@dataclass
class DistanceEntropy:
    """Result of :func:`head_distance_entropy` for ``L`` layers and ``H`` heads."""

    distance: torch.Tensor  # (L, H) eq. 13: mean attention distance per head, in tokens
    entropy: torch.Tensor  # (L, H) eq. 15 averaged over query tokens: mean attention entropy per head, in nats
    tokens: int  # query tokens in the sample (rows averaged)
    sentences: int

    @property
    def layer_distance(self) -> torch.Tensor:
        """(L,) eq. 14: mean over heads of each layer's distances."""
        return self.distance.mean(dim=1)

    @property
    def layer_entropy(self) -> torch.Tensor:
        """(L,) eq. 16: mean over heads of each layer's entropies."""
        return self.entropy.mean(dim=1)


def _as_layers(weights: torch.Tensor) -> torch.Tensor:
    if weights.dim() == 3:
        return weights.unsqueeze(0)
    if weights.dim() != 4:
        raise ValueError(f"attention weights must be (H, T, S) or (L, H, T, S) per sentence, "
                         f"got {tuple(weights.shape)}")
    return weights


def head_distance_entropy(attentions: Iterable[torch.Tensor], *, past_only: bool = False) -> DistanceEntropy:
    """Eqs. 13-16 over a corpus sample.

    Args:
        attentions: one tensor per sentence, (L, H, T, S) or (H, T, S) (read as one layer), already cut to the
            sentence's true lengths (no padding rows or columns). Self-attention has ``T == S``.
        past_only: sum over keys ``j <= i`` only, as the equations are printed (see the module docstring).
    """
    dist_sum = weight_sum = entropy_sum = None
    tokens = sentences = 0
    for weights in attentions:
        w = _as_layers(weights).double()  # (L, H, T, S)
        if past_only:
            w = w * torch.ones(w.shape[-2], w.shape[-1], dtype=w.dtype).tril()  # keys j <= i
        d = distance_matrix(w.shape[-2], w.shape[-1])
        parts = ((w * d).sum(dim=(-1, -2)), w.sum(dim=(-1, -2)), attention_entropy(w).sum(dim=-1))
        if dist_sum is None:
            dist_sum, weight_sum, entropy_sum = (torch.zeros_like(parts[0]) for _ in range(3))
        if parts[0].shape != dist_sum.shape:
            raise ValueError(f"sentence {sentences} has (L, H) = {tuple(parts[0].shape)}, "
                             f"earlier ones {tuple(dist_sum.shape)}")
        dist_sum, weight_sum, entropy_sum = dist_sum + parts[0], weight_sum + parts[1], entropy_sum + parts[2]
        tokens += w.shape[-2]
        sentences += 1
    if dist_sum is None or tokens == 0:
        raise ValueError("head_distance_entropy needs at least one sentence with at least one token")
    distance = torch.where(weight_sum > 0, dist_sum / weight_sum.clamp_min(1e-300), torch.zeros_like(dist_sum))
    return DistanceEntropy(distance=distance, entropy=entropy_sum / tokens, tokens=tokens, sentences=sentences)


def shared_colour_limits(results: Sequence[DistanceEntropy]) -> dict[str, tuple[float, float]]:
    """``{"distance": (low, high), "entropy": (low, high)}`` over every result: give them to each model's
    :func:`plot_distance_entropy` so that one colour means one value in every figure compared."""
    if not results:
        raise ValueError("shared_colour_limits needs at least one result")
    return {name: (min(float(getattr(r, name).min()) for r in results),
                   max(float(getattr(r, name).max()) for r in results)) for name in ("distance", "entropy")}


def plot_distance_entropy(result: DistanceEntropy, *, head_labels: Sequence[str] | None = None, title: str = "",
                          limits: Mapping[str, tuple[float, float]] | None = None):
    """Two heatmaps (layer x head) of mean distance and entropy, each value written in its cell; returns the Figure.

    ``limits`` (:func:`shared_colour_limits`) fixes each panel's colour scale; without it each figure spans its own
    values, so two models' figures cannot be compared by colour."""
    layers, heads = result.distance.shape
    labels = list(head_labels) if head_labels is not None else [str(h) for h in range(heads)]
    fig = new_figure(2.0 + 1.1 * heads, 1.4 + 0.9 * layers)
    axes = fig.subplots(1, 2, squeeze=False)[0]
    for ax, values, key, name in ((axes[0], result.distance, "distance", "mean distance (tokens)"),
                                  (axes[1], result.entropy, "entropy", "mean entropy (nats)")):
        low, high = (limits or {}).get(key, (None, None))
        image = ax.imshow(values.numpy(), cmap="magma", aspect="auto", vmin=low, vmax=high)
        for (layer, head), value in zip(((l, h) for l in range(layers) for h in range(heads)), values.flatten()):
            ax.text(head, layer, f"{value:.2f}", ha="center", va="center", fontsize=7, color="tab:cyan")
        ax.set_xticks(range(heads), labels, fontsize=8)
        ax.set_yticks(range(layers), [f"layer {l + 1}" for l in range(layers)], fontsize=8)
        ax.set_xlabel("head")
        ax.set_title(name, fontsize=9)
        fig.colorbar(image, ax=ax, shrink=0.8)
    fig.suptitle(title or f"Attention distance and entropy over {result.sentences} sentences ({result.tokens} tokens)",
                 fontsize=10)
    return fig


def plot_layer_profiles(profiles: Mapping[str, Sequence[tuple[str, Sequence[float], Sequence[float]]]], *,
                        title: str = ""):
    """Layer distance (eq. 14) and layer entropy (eq. 16) against the layer, one line per model; returns the Figure.

    ``profiles`` maps a system to its models (its seeds), each ``(label, distance per layer, entropy per layer)``.
    Each system has one colour and each of its models one marker, so the seeds of a system read as a band and a
    difference between systems that holds on every seed shows as two bands apart.
    """
    colours, markers = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple"), "os^vDP*X"
    fig = new_figure(9.5, 3.2)
    axes = fig.subplots(1, 2, squeeze=False)[0]
    for (system, models), colour in zip(profiles.items(), colours * len(profiles)):
        for (label, distance, entropy), marker in zip(models, markers * len(models)):
            if len(distance) != len(entropy):
                raise ValueError(f"{system} {label}: {len(distance)} layer distances but {len(entropy)} entropies")
            layers = range(1, len(distance) + 1)
            for ax, values in ((axes[0], distance), (axes[1], entropy)):
                ax.plot(layers, list(values), color=colour, marker=marker, markersize=4, linewidth=1,
                        label=f"{system} {label}")
    for ax, name in ((axes[0], "mean distance (tokens)"), (axes[1], "mean entropy (nats)")):
        ax.set_xlabel("encoder layer")
        ax.set_title(name, fontsize=9)
        ax.grid(alpha=0.3)
    fig.legend(*axes[0].get_legend_handles_labels(), loc="outside right center", fontsize=7)
    fig.suptitle(title or "Attention distance and entropy per layer (mean over the heads of each layer)", fontsize=10)
    return fig
