"""Per-head response by relative source position (multi-head Luong attention paper, section 6).

The paper sums each head's attention weights "by their relative positions in the source sentence". This library reads
the relative position of source token ``s`` seen from target step ``t`` as the offset ``r = s - t``: ``r = 0`` is the
diagonal, ``r < 0`` source tokens already passed, ``r > 0`` tokens ahead. The response of head ``h`` at offset ``r`` is

    response[h, r] = sum over sentences, sum over (t, s) with s - t = r, of alpha[h, t, s]

so a head that always looks ``k`` tokens ahead of the diagonal peaks at ``r = k``. Because short offsets occur in more
(t, s) pairs than long ones, :attr:`RelativePositionResponse.pairs` counts the pairs per offset so that a caller can
also plot the mean weight per pair (:meth:`RelativePositionResponse.mean_per_pair`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

import torch

from mma_nmt.analysis._figures import new_figure


@dataclass
class RelativePositionResponse:
    """Result of :func:`relative_position_response` for ``H`` heads over offsets ``-max_offset .. max_offset``."""

    offsets: torch.Tensor  # (R,) int64, R = 2 * max_offset + 1
    response: torch.Tensor  # (H, R) float64 summed attention weight at each offset s - t
    pairs: torch.Tensor  # (R,) int64 number of (sentence, t, s) pairs with that offset
    sentences: int

    def normalized(self) -> torch.Tensor:
        """(H, R) each head's response divided by its total, so it sums to 1 over the offsets."""
        total = self.response.sum(dim=1, keepdim=True)
        return self.response / total.clamp_min(1e-300)

    def mean_per_pair(self) -> torch.Tensor:
        """(H, R) summed response divided by the number of (t, s) pairs at each offset (0 where there are none)."""
        return self.response / self.pairs.clamp_min(1).to(self.response.dtype)

    def peak_offsets(self) -> torch.Tensor:
        """(H,) int64 offset of the largest summed response of each head."""
        return self.offsets[self.response.argmax(dim=1)]


def relative_position_response(attentions: Iterable[torch.Tensor], *, max_offset: int | None = None
                               ) -> RelativePositionResponse:
    """Sums attention weights by offset ``s - t`` per head.

    Args:
        attentions: one (H, T, S) tensor of cross-attention weights per sentence (target steps x source positions), cut
            to the true lengths. A decoder with several attention layers gives one tensor per layer: analyse each layer
            separately.
        max_offset: keep offsets within ``[-max_offset, max_offset]``; weights further away are dropped (their pairs
            are not counted either). ``None`` keeps every offset that occurs.
    """
    if max_offset is not None and max_offset < 0:
        raise ValueError(f"max_offset must be >= 0, got {max_offset}")
    by_sentence = []  # (response (H, T + S - 1), pairs (T + S - 1,)) over offsets -(T - 1) .. S - 1
    for weights in attentions:
        if weights.dim() != 3:
            raise ValueError(f"attention weights must be (H, T, S) per sentence, got {tuple(weights.shape)}")
        if by_sentence and weights.shape[0] != by_sentence[0][0].shape[0]:
            raise ValueError(f"sentence {len(by_sentence)} has {weights.shape[0]} heads, "
                             f"earlier ones {by_sentence[0][0].shape[0]}")
        w = weights.detach().double().cpu()
        heads, target_len, source_len = w.shape
        steps = torch.arange(target_len).view(-1, 1)  # (T, 1)
        bins = (torch.arange(source_len).view(1, -1) - steps + target_len - 1).flatten()  # (T*S,) s - t + T - 1
        response = w.new_zeros(heads, target_len + source_len - 1).index_add_(1, bins, w.reshape(heads, -1))
        by_sentence.append((response, torch.bincount(bins, minlength=target_len + source_len - 1), target_len))
    if not by_sentence:
        raise ValueError("relative_position_response needs at least one sentence")
    reach = max(max(r.shape[1] - n, n - 1) for r, _, n in by_sentence)  # largest |s - t|: S - 1 or T - 1
    reach = reach if max_offset is None else max_offset
    heads = by_sentence[0][0].shape[0]
    response = torch.zeros(heads, 2 * reach + 1, dtype=torch.float64)
    counts = torch.zeros(2 * reach + 1, dtype=torch.int64)
    for sentence_response, sentence_pairs, target_len in by_sentence:
        offsets = torch.arange(sentence_response.shape[1]) - (target_len - 1)  # offset of each column
        keep = offsets.abs() <= reach
        response.index_add_(1, offsets[keep] + reach, sentence_response[:, keep])
        counts.index_add_(0, offsets[keep] + reach, sentence_pairs[keep])
    offsets = torch.arange(-reach, reach + 1)
    return RelativePositionResponse(offsets=offsets, response=response, pairs=counts, sentences=len(by_sentence))


def head_divergence(result: RelativePositionResponse, *, window: int | None = 10) -> float:
    """How differently the heads respond: the mean over head pairs of the total-variation distance between their
    normalised responses within ``[-window, window]`` (0: identical heads, 1: no overlap; NaN for one head)."""
    keep = torch.ones_like(result.offsets, dtype=torch.bool) if window is None else result.offsets.abs() <= window
    values = result.response[:, keep]
    values = values / values.sum(dim=1, keepdim=True).clamp_min(1e-300)  # (H, R')
    heads = values.shape[0]
    if heads < 2:
        return float("nan")
    pairs = [0.5 * float((values[a] - values[b]).abs().sum()) for a in range(heads) for b in range(a + 1, heads)]
    return sum(pairs) / len(pairs)


def plot_relative_position_response(result: RelativePositionResponse, *, head_labels: Sequence[str] | None = None,
                                    window: int | None = 10, normalize: bool = True, title: str = ""):
    """One line per head: response (normalised per head when ``normalize``) against offset ``s - t``; returns a Figure.

    ``window`` limits the x axis to ``[-window, window]`` (None: every offset).
    """
    title = title or f"Per-head response by relative position ({result.sentences} sentences)"
    return plot_relative_position_panels({title: result}, head_labels=head_labels, window=window,
                                         normalize=normalize)


def plot_relative_position_panels(results: Mapping[str, RelativePositionResponse], *,
                                  head_labels: Sequence[str] | None = None, window: int | None = 10,
                                  normalize: bool = True, title: str = ""):
    """:func:`plot_relative_position_response` of several models side by side (panel titles are the keys), on one
    y scale; returns a Figure."""
    if not results:
        raise ValueError("plot_relative_position_panels needs at least one response")
    fig = new_figure(1.0 + 6.0 * len(results), 3.6 if not title else 4.0)
    axes = fig.subplots(1, len(results), squeeze=False, sharey=True)[0]
    for ax, (name, result) in zip(axes, results.items()):
        values = result.normalized() if normalize else result.response
        keep = torch.ones_like(result.offsets, dtype=torch.bool)
        if window is not None:
            keep = result.offsets.abs() <= window
        offsets = result.offsets[keep].numpy()
        for h in range(values.shape[0]):
            label = head_labels[h] if head_labels is not None else f"head {h}"
            ax.plot(offsets, values[h, keep].numpy(), marker="o", markersize=3, label=label)
        ax.axvline(0, color="grey", linewidth=0.8, linestyle=":")
        ax.set_xlabel("relative source position s - t")
        ax.set_title(name, fontsize=9)
        ax.legend(fontsize=7, ncol=2)
    axes[0].set_ylabel("share of attention" if normalize else "summed attention")
    if title:
        fig.suptitle(title, fontsize=10)
    return fig
