"""Analyses of Gaussian-mixture concentrated cross-attention (GMM paper, section 6): gate distribution per decoder
layer, entropy of dot-product / mixture / total attention by source-length bucket, and the n-gram precision gap to a
baseline.

Entropy: each row of weights is a distribution over the ``J`` true source positions. The approximately normalised
Gaussian mixture ``beta`` (SPEC section 5) may sum to slightly less or more than 1, so every row is divided by its sum
before ``-sum p log p`` (rows that sum to 0 are skipped). Dot-product ``alpha`` and total ``gamma`` rows already sum to
1. The mean is taken over every (layer, head, target token) row of the sentences in a bucket; the paper's buckets are
(0, 20], [21, 40] and [41, inf) source tokens.

N-gram precision: from sacreBLEU's own statistics. ``BLEU(max_ngram_order=N).corpus_score`` returns, per order ``n``,
the clipped n-gram matches (``counts``) and hypothesis n-grams (``totals``) summed over the corpus; the precision is
``100 * counts[n] / totals[n]``, without the smoothing sacreBLEU applies to zero matches inside the BLEU score. So the
numbers use sacreBLEU's tokenisation (``13a`` by default, ``"none"`` for text tokenised already) and clipping rules.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

import torch
from sacrebleu.metrics import BLEU

from mma_nmt.analysis._figures import new_figure
from mma_nmt.analysis.distance_entropy import attention_entropy

PAPER_ENTROPY_BUCKETS: tuple[tuple[int, int | None], ...] = ((1, 20), (21, 40), (41, None))


@dataclass
class GateDistribution:
    """Gate values ``g`` of every (head, target token) per decoder layer."""

    per_layer: list[torch.Tensor]  # L tensors, each (N_l,) float64

    @property
    def means(self) -> torch.Tensor:
        """(L,) mean gate per layer (weight on the Gaussian mixture)."""
        return torch.stack([v.mean() if v.numel() else torch.tensor(float("nan"), dtype=torch.float64)
                            for v in self.per_layer])

    def histogram(self, bins: int = 20) -> torch.Tensor:
        """(L, bins) fraction of gate values per equal-width bin of [0, 1]."""
        rows = [torch.histc(v, bins=bins, min=0.0, max=1.0) / max(v.numel(), 1) for v in self.per_layer]
        return torch.stack(rows)


def gate_distribution(gates: Iterable[torch.Tensor]) -> GateDistribution:
    """Collects gates per layer from one tensor per sentence, (L, H, T) or (L, T) (cut to the true target length).

    Layers without GMM attention can be passed as NaN and are left out of that layer's values.
    """
    per_layer: list[list[torch.Tensor]] | None = None
    for k, g in enumerate(gates):
        if g.dim() not in (2, 3):
            raise ValueError(f"gates must be (L, H, T) or (L, T) per sentence, got {tuple(g.shape)}")
        if per_layer is None:
            per_layer = [[] for _ in range(g.shape[0])]
        if g.shape[0] != len(per_layer):
            raise ValueError(f"sentence {k} has {g.shape[0]} layers, earlier ones {len(per_layer)}")
        for layer in range(g.shape[0]):
            values = g[layer].double().flatten()
            per_layer[layer].append(values[~values.isnan()])
    if per_layer is None:
        raise ValueError("gate_distribution needs at least one sentence")
    return GateDistribution(per_layer=[torch.cat(v) for v in per_layer])


def plot_gate_distribution(result: GateDistribution, *, kind: str = "violin", bins: int = 20, title: str = ""):
    """Violin plot (``kind="violin"``) or histograms (``"hist"``) of the gate per decoder layer; returns the Figure."""
    layers = len(result.per_layer)
    fig = new_figure(max(4.0, 1.0 + 0.9 * layers), 3.4)
    ax = fig.subplots()
    if kind == "violin":
        present = [i for i, v in enumerate(result.per_layer) if v.numel() > 1]
        ax.violinplot([result.per_layer[i].numpy() for i in present], positions=[i + 1 for i in present],
                      showmeans=True)
        ax.set_xticks(range(1, layers + 1), [f"L{i + 1}" for i in range(layers)])
        ax.set_xlabel("decoder layer")
        ax.set_ylabel("gate g (weight of the mixture)")
        ax.set_ylim(0, 1)
    elif kind == "hist":
        edges = torch.linspace(0, 1, bins + 1)
        centres = ((edges[:-1] + edges[1:]) / 2).numpy()
        for i, row in enumerate(result.histogram(bins)):
            ax.plot(centres, row.numpy(), marker=".", label=f"L{i + 1}")
        ax.set_xlabel("gate g")
        ax.set_ylabel("fraction of tokens")
        ax.legend(fontsize=7)
    else:
        raise ValueError(f"kind must be 'violin' or 'hist', got {kind!r}")
    ax.set_title(title or "Gate distribution per decoder layer", fontsize=10)
    return fig


def bucket_label(low: int, high: int | None) -> str:
    return f"[{low}, {high}]" if high is not None else f"[{low}, inf)"


def _bucket_of(length: int, buckets: Sequence[tuple[int, int | None]]) -> int | None:
    for index, (low, high) in enumerate(buckets):
        if length >= low and (high is None or length <= high):
            return index
    return None


def normalized_row_entropy(weights: torch.Tensor) -> torch.Tensor:
    """Entropy of each row of (..., S) after dividing it by its sum; rows summing to 0 give NaN."""
    w = weights.double()
    total = w.sum(dim=-1, keepdim=True)
    p = w / total.clamp_min(1e-300)
    return torch.where(total.squeeze(-1) > 0, attention_entropy(p), torch.full_like(total.squeeze(-1), float("nan")))


@dataclass
class EntropyByLength:
    """Mean row entropy (nats) per attention kind, overall and per source-length bucket."""

    kinds: list[str]  # e.g. ["dot", "mixture", "total"]
    buckets: list[str]  # bucket labels, short to long
    overall: dict[str, float]  # kind -> mean entropy over every row
    by_bucket: dict[str, list[float]]  # kind -> one mean per bucket (NaN where a bucket is empty)
    sentences_per_bucket: list[int]

    def table(self) -> str:
        """Markdown table in the paper's layout (Table 6): rows = kinds, columns = All + buckets."""
        head = "| kind | All | " + " | ".join(self.buckets) + " |"
        rule = "|---" * (len(self.buckets) + 2) + "|"
        rows = [f"| {k} | {self.overall[k]:.2f} | " + " | ".join(f"{v:.2f}" for v in self.by_bucket[k]) + " |"
                for k in self.kinds]
        return "\n".join([head, rule, *rows])


def entropy_by_source_length(samples: Iterable[Mapping[str, torch.Tensor]], *,
                             source_lengths: Sequence[int] | None = None,
                             buckets: Sequence[tuple[int, int | None]] = PAPER_ENTROPY_BUCKETS) -> EntropyByLength:
    """Mean entropy of each attention kind by source-length bucket (paper Table 6).

    Args:
        samples: one dict per sentence mapping a kind name (``"dot"``, ``"mixture"``, ``"total"``; any names work, the
            same in every sentence) to weights (..., T, S) cut to the true lengths, e.g. (L, H, T, S).
        source_lengths: length of each sentence for bucketing (e.g. in words); default: ``S`` of the weights.
        buckets: inclusive ``(low, high)`` ranges, ``high=None`` for open-ended.
    """
    sums: dict[str, torch.Tensor] = {}
    counts: dict[str, torch.Tensor] = {}
    sentences = torch.zeros(len(buckets), dtype=torch.int64)
    kinds: list[str] | None = None
    for k, sample in enumerate(samples):
        kinds = kinds or list(sample)
        if list(sample) != kinds:
            raise ValueError(f"sentence {k} has kinds {list(sample)}, earlier ones {kinds}")
        length = source_lengths[k] if source_lengths is not None else next(iter(sample.values())).shape[-1]
        bucket = _bucket_of(int(length), buckets)
        if bucket is None:
            continue
        sentences[bucket] += 1
        for kind, weights in sample.items():
            h = normalized_row_entropy(weights).flatten()
            h = h[~h.isnan()]
            sums.setdefault(kind, torch.zeros(len(buckets), dtype=torch.float64))[bucket] += h.sum()
            counts.setdefault(kind, torch.zeros(len(buckets), dtype=torch.float64))[bucket] += h.numel()
    if kinds is None:
        raise ValueError("entropy_by_source_length needs at least one sentence")
    kinds = [k for k in kinds if k in sums]
    by_bucket = {k: (sums[k] / counts[k]).tolist() for k in kinds}  # 0/0 -> NaN for empty buckets
    overall = {k: float(sums[k].sum() / counts[k].sum()) for k in kinds}
    return EntropyByLength(kinds=kinds, buckets=[bucket_label(*b) for b in buckets], overall=overall,
                           by_bucket=by_bucket, sentences_per_bucket=sentences.tolist())


def plot_entropy_by_source_length(result: EntropyByLength, *, title: str = ""):
    """Grouped bars: mean entropy per bucket, one bar per attention kind; returns the Figure."""
    fig = new_figure(6.0, 3.4)
    ax = fig.subplots()
    width = 0.8 / max(len(result.kinds), 1)
    for i, kind in enumerate(result.kinds):
        xs = [b + (i - (len(result.kinds) - 1) / 2) * width for b in range(len(result.buckets))]
        ax.bar(xs, result.by_bucket[kind], width=width, label=kind)
    ax.set_xticks(range(len(result.buckets)),
                  [f"{b}\n{n} sent." for b, n in zip(result.buckets, result.sentences_per_bucket)], fontsize=8)
    ax.set_xlabel("source length")
    ax.set_ylabel("mean entropy (nats)")
    ax.set_title(title or "Attention entropy by source length", fontsize=10)
    ax.legend(fontsize=8)
    return fig


@dataclass
class NgramPrecision:
    """Corpus n-gram precision (percent) for n = 1..N, from sacreBLEU's clipped counts."""

    orders: list[int]
    precision: list[float]
    matches: list[int]
    totals: list[int]


def ngram_precisions(hypotheses: Sequence[str], references: Sequence[str], *, max_n: int = 4,
                     tokenize: str = "13a") -> NgramPrecision:
    """Clipped corpus n-gram precision per order (one reference per sentence); see the module docstring."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    stats = BLEU(max_ngram_order=max_n, tokenize=tokenize).corpus_score(list(hypotheses), [list(references)])
    precision = [100.0 * m / t if t else 0.0 for m, t in zip(stats.counts, stats.totals)]
    return NgramPrecision(orders=list(range(1, max_n + 1)), precision=precision, matches=list(stats.counts),
                          totals=list(stats.totals))


def ngram_precision_gap(system: Sequence[str], baseline: Sequence[str], references: Sequence[str], *,
                        max_n: int = 4, tokenize: str = "13a") -> dict[int, float]:
    """Paper Figure 6: ``{n: precision_n(system) - precision_n(baseline)}`` in percentage points."""
    ours = ngram_precisions(system, references, max_n=max_n, tokenize=tokenize)
    base = ngram_precisions(baseline, references, max_n=max_n, tokenize=tokenize)
    return {n: a - b for n, a, b in zip(ours.orders, ours.precision, base.precision)}


def plot_ngram_precision_gap(gap: Mapping[int, float], *, title: str = ""):
    """Bar per n-gram order of the precision gap (percentage points); returns the Figure."""
    fig = new_figure(4.5, 3.0)
    ax = fig.subplots()
    orders = sorted(gap)
    ax.bar([str(n) for n in orders], [gap[n] for n in orders], color=["tab:green" if gap[n] >= 0 else "tab:red"
                                                                    for n in orders])
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xlabel("n-gram order")
    ax.set_ylabel("precision gap (points)")
    ax.set_title(title or "N-gram precision: system minus baseline", fontsize=10)
    return fig
