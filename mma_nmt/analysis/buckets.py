"""BLEU by source-length bucket (all papers; GMM paper Figure 7) and test-time layer masking tables (MLMHA Table 7).

Buckets follow the GMM paper: ``(0, 10], (10, 20], ..., (50, inf)`` source tokens (``edges=(10, 20, 30, 40, 50)``),
lengths counted as whitespace tokens of the source line unless a ``length_fn`` is given. Each bucket's score is
sacreBLEU's corpus BLEU over the sentences of that bucket only (not an average of sentence BLEU).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from sacrebleu.metrics import BLEU

from mma_nmt.analysis._figures import new_figure

PAPER_LENGTH_EDGES: tuple[int, ...] = (10, 20, 30, 40, 50)


@dataclass
class BucketScore:
    label: str  # "(10, 20]"
    low: int  # exclusive lower edge
    high: int | None  # inclusive upper edge, None for the open last bucket
    sentences: int
    bleu: float | None  # None for an empty bucket


def bucket_edges_labels(edges: Sequence[int]) -> list[tuple[str, int, int | None]]:
    """``(10, 20)`` -> ``[("(0, 10]", 0, 10), ("(10, 20]", 10, 20), ("(20, inf)", 20, None)]``."""
    edges = list(edges)
    if not edges or any(b <= a for a, b in zip(edges, edges[1:])) or edges[0] <= 0:
        raise ValueError(f"edges must be positive and strictly increasing, got {edges}")
    lows = [0] + edges
    highs: list[int | None] = edges + [None]
    return [(f"({lo}, {hi}]" if hi is not None else f"({lo}, inf)", lo, hi) for lo, hi in zip(lows, highs)]


def assign_buckets(lengths: Sequence[int], edges: Sequence[int] = PAPER_LENGTH_EDGES) -> list[int]:
    """Index of the bucket of each length (``low < length <= high``)."""
    spans = bucket_edges_labels(edges)
    out = []
    for length in lengths:
        out.append(next(i for i, (_, lo, hi) in enumerate(spans) if length > lo and (hi is None or length <= hi))
                   if length > 0 else 0)
    return out


def bleu_by_source_length(sources: Sequence[str], hypotheses: Sequence[str], references: Sequence[str], *,
                          edges: Sequence[int] = PAPER_LENGTH_EDGES, tokenize: str = "13a",
                          length_fn: Callable[[str], int] = lambda line: len(line.split())) -> list[BucketScore]:
    """Corpus BLEU of each source-length bucket, short to long (empty buckets get ``bleu=None``)."""
    if not len(sources) == len(hypotheses) == len(references):
        raise ValueError(f"{len(sources)} sources, {len(hypotheses)} hypotheses, {len(references)} references")
    index = assign_buckets([length_fn(s) for s in sources], edges)
    rows = []
    for b, (label, lo, hi) in enumerate(bucket_edges_labels(edges)):
        members = [k for k, i in enumerate(index) if i == b]
        score = None
        if members:
            score = BLEU(tokenize=tokenize).corpus_score([hypotheses[k] for k in members],
                                                          [[references[k] for k in members]]).score
        rows.append(BucketScore(label=label, low=lo, high=hi, sentences=len(members), bleu=score))
    return rows


def plot_bleu_by_source_length(systems: Mapping[str, Sequence[BucketScore]], *, title: str = ""):
    """Grouped bars of BLEU per bucket, one colour per system (all systems must use the same buckets)."""
    names = list(systems)
    first = list(systems[names[0]])
    fig = new_figure(7.0, 3.4)
    ax = fig.subplots()
    width = 0.8 / len(names)
    for i, name in enumerate(names):
        rows = list(systems[name])
        if [r.label for r in rows] != [r.label for r in first]:
            raise ValueError(f"system {name!r} uses different buckets from {names[0]!r}")
        xs = [b + (i - (len(names) - 1) / 2) * width for b in range(len(rows))]
        ax.bar(xs, [r.bleu if r.bleu is not None else 0.0 for r in rows], width=width, label=name)
    ax.set_xticks(range(len(first)), [f"{r.label}\n{r.sentences} sent." for r in first], fontsize=8)
    ax.set_xlabel("source length (tokens)")
    ax.set_ylabel("BLEU")
    ax.set_title(title or "BLEU by source length", fontsize=10)
    ax.legend(fontsize=8)
    return fig


@dataclass
class LayerMaskingRow:
    masked_layer: int | None  # 1-based encoder layer whose output f_i was zeroed; None = full model
    bleu: float
    delta: float  # bleu - bleu of the full model


def layer_masking_table(translate: Callable[[int | None], Sequence[str]], references: Sequence[str], *,
                        num_layers: int, tokenize: str = "13a") -> list[LayerMaskingRow]:
    """MLMHA Table 7: BLEU when each encoder layer output is replaced by zeros at test time.

    ``translate(masked_layer)`` must decode the test set with encoder output ``f_masked_layer`` (1-based) zeroed before
    the decoder reads it, or with nothing masked when given ``None``, and return one detokenised hypothesis per
    reference. The first row is the full model; each further row one masked layer, with its BLEU difference.
    """
    def score(hypotheses: Sequence[str]) -> float:
        if len(hypotheses) != len(references):
            raise ValueError(f"translate returned {len(hypotheses)} hypotheses for {len(references)} references")
        return BLEU(tokenize=tokenize).corpus_score(list(hypotheses), [list(references)]).score

    full = score(translate(None))
    rows = [LayerMaskingRow(masked_layer=None, bleu=full, delta=0.0)]
    for layer in range(1, num_layers + 1):
        bleu = score(translate(layer))
        rows.append(LayerMaskingRow(masked_layer=layer, bleu=bleu, delta=bleu - full))
    return rows


def format_layer_masking_table(rows: Sequence[LayerMaskingRow]) -> str:
    """Markdown table: masked layer, BLEU, difference to the full model."""
    lines = ["| masked layer | BLEU | delta |", "|---|---|---|"]
    for r in rows:
        name = "none (full model)" if r.masked_layer is None else str(r.masked_layer)
        lines.append(f"| {name} | {r.bleu:.2f} | {r.delta:+.2f} |")
    return "\n".join(lines)
