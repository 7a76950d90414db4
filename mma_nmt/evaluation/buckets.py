"""BLEU by source-length bucket (the GMM paper's analysis of long sentences)."""

from __future__ import annotations

from sacrebleu.metrics import BLEU


def bucket_name(length: int, edges: list[int]) -> str:
    """``edges`` [10, 20] gives buckets "1-10", "11-20", "21+"."""
    low = 1
    for edge in edges:
        if length <= edge:
            return f"{low}-{edge}"
        low = edge + 1
    return f"{low}+"


def bleu_by_source_length(sources: list[str], hypotheses: list[str], references: list[str],
                          edges: list[int]) -> list[dict]:
    """Per bucket of whitespace-token source length: sentence count and corpus BLEU of the bucket, short to long."""
    groups: dict[str, list[int]] = {}
    for i, source in enumerate(sources):
        groups.setdefault(bucket_name(len(source.split()), sorted(edges)), []).append(i)
    order = [bucket_name(e, sorted(edges)) for e in sorted(edges)] + [f"{max(edges) + 1}+"]
    rows = []
    for name in order:
        members = groups.get(name, [])
        if members:
            score = BLEU().corpus_score([hypotheses[i] for i in members], [[references[i] for i in members]]).score
            rows.append({"bucket": name, "sentences": len(members), "bleu": score})
    return rows
