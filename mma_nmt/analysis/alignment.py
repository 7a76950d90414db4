"""Word alignment from cross-attention, scored against gold alignments (GMM paper, section 6.4).

Gold data: the RWTH German-English set in ``shared/data/rwth_deen_alignment`` (508 Europarl sentence pairs). Each
line of ``test.talp.gz`` lists links ``i-j`` (Sure) or ``ipj`` (Possible), ``i`` a 1-based index into the whitespace
tokens of ``test.de``, ``j`` into ``test.en``. This module stores links 0-based as ``(german_index, english_index)``.

Scores (Och & Ney 2003), with the gold ``S`` (sure) a subset of ``P`` (possible, which includes the sure links) and a
hypothesis ``A``, all counted over the whole corpus: precision ``|A & P| / |A|``, recall ``|A & S| / |S|``,
``AER = 1 - (|A & S| + |A & P|) / (|A| + |S|)``.

Extraction (paper: force-decode the reference, average the heads of one layer, the source token with the largest weight
is the alignment of each target token): see :func:`links_from_attention` and :func:`align_with_model`. Models work on
subword pieces, gold links on words. Pieces are mapped back to words before the arg-max
(:func:`piece_to_word_attention`):
**source pieces of a word are summed** (the word receives the attention mass of all its pieces, so each row stays a
distribution over words) and **target pieces of a word are averaged** (each piece contributes one distribution; their
mean is again a distribution and does not favour words split into many pieces). Special tokens (BOS/EOS, word id -1)
are dropped; rows are not renormalised, which does not change the arg-max.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

import torch

from mma_nmt.data.fileio import read_text_lines

Link = tuple[int, int]
AttentionFn = Callable[[list[str], list[str]], Mapping[str, torch.Tensor]]


@dataclass
class GoldAlignment:
    """One sentence pair with 0-based ``(german_index, english_index)`` links."""

    german: list[str]
    english: list[str]
    sure: set[Link]
    possible: set[Link]  # every possible link, sure ones included (P contains S)


def parse_talp_line(line: str) -> tuple[set[Link], set[Link]]:
    """``"1-1 2p3"`` -> (sure ``{(0, 0)}``, possible ``{(0, 0), (1, 2)}``), 0-based; possible includes sure."""
    sure: set[Link] = set()
    possible: set[Link] = set()
    for item in line.split():
        separator = "-" if "-" in item else "p"
        left, _, right = item.partition(separator)
        if not left.isdigit() or not right.isdigit():
            raise ValueError(f"bad alignment link {item!r}: expected 'i-j' (sure) or 'ipj' (possible)")
        link = (int(left) - 1, int(right) - 1)
        if min(link) < 0:
            raise ValueError(f"bad alignment link {item!r}: indices are 1-based")
        possible.add(link)
        if separator == "-":
            sure.add(link)
    return sure, possible


def read_gold_alignments(directory: str | Path) -> list[GoldAlignment]:
    """Reads ``test.de.gz``, ``test.en.gz`` and ``test.talp.gz`` from ``directory``; checks every link is in range."""
    directory = Path(directory)
    german, english, talp = (read_text_lines(directory / name) for name in ("test.de.gz", "test.en.gz", "test.talp.gz"))
    if not len(german) == len(english) == len(talp):
        raise ValueError(f"{directory}: {len(german)} German, {len(english)} English, {len(talp)} alignment lines")
    pairs = []
    for number, (de, en, line) in enumerate(zip(german, english, talp), start=1):
        sure, possible = parse_talp_line(line)
        de_tokens, en_tokens = de.split(), en.split()
        bad = [link for link in possible if link[0] >= len(de_tokens) or link[1] >= len(en_tokens)]
        if bad:
            raise ValueError(f"{directory / 'test.talp.gz'}:{number}: links {sorted(bad)} out of range")
        pairs.append(GoldAlignment(german=de_tokens, english=en_tokens, sure=sure, possible=possible))
    return pairs


@dataclass
class AlignmentScores:
    """Corpus-level alignment quality; rates are fractions in [0, 1]."""

    aer: float
    precision: float
    recall: float
    hypothesis_links: int  # |A|
    sure_links: int  # |S|
    hits_sure: int  # |A & S|
    hits_possible: int  # |A & P|
    per_sentence: list[set[Link]] = field(default_factory=list, repr=False)  # hypothesis links, when kept


def alignment_scores(hypotheses: Sequence[set[Link]], sure: Sequence[set[Link]], possible: Sequence[set[Link]]
                     ) -> AlignmentScores:
    """Och & Ney precision, recall and AER summed over sentences. ``possible[k]`` must include ``sure[k]``."""
    if not len(hypotheses) == len(sure) == len(possible):
        raise ValueError(f"{len(hypotheses)} hypotheses, {len(sure)} sure and {len(possible)} possible link sets")
    a = s = a_s = a_p = 0
    for k, (hyp, sure_k, possible_k) in enumerate(zip(hypotheses, sure, possible)):
        if not sure_k <= possible_k:
            raise ValueError(f"sentence {k}: possible links must include the sure links")
        a, s = a + len(hyp), s + len(sure_k)
        a_s, a_p = a_s + len(hyp & sure_k), a_p + len(hyp & possible_k)
    precision = a_p / a if a else 0.0
    recall = a_s / s if s else 0.0
    aer = 1.0 - (a_s + a_p) / (a + s) if a + s else 0.0
    return AlignmentScores(aer=aer, precision=precision, recall=recall, hypothesis_links=a, sure_links=s,
                           hits_sure=a_s, hits_possible=a_p, per_sentence=list(hypotheses))


def _group(weights: torch.Tensor, word_ids: torch.Tensor, dim: int, reduce: str) -> torch.Tensor:
    """Sums or averages slices of ``weights`` along ``dim`` that share a word id >= 0; words in id order."""
    word_ids = torch.as_tensor(word_ids, dtype=torch.int64)
    if word_ids.numel() != weights.shape[dim]:
        raise ValueError(f"{word_ids.numel()} word ids for {weights.shape[dim]} pieces along dim {dim}")
    words = int(word_ids.max()) + 1 if word_ids.numel() and word_ids.max() >= 0 else 0
    moved = weights.movedim(dim, 0)  # (pieces, ...)
    out = moved.new_zeros((words,) + moved.shape[1:])
    keep = word_ids >= 0
    out.index_add_(0, word_ids[keep], moved[keep])
    if reduce == "mean":
        counts = torch.bincount(word_ids[keep], minlength=words).clamp_min(1).to(out.dtype)
        out = out / counts.view((-1,) + (1,) * (out.dim() - 1))
    return out.movedim(0, dim)


def piece_to_word_attention(weights: torch.Tensor, *, source_word_ids: torch.Tensor | None = None,
                            target_word_ids: torch.Tensor | None = None) -> torch.Tensor:
    """(..., T_pieces, S_pieces) -> (..., T_words, S_words): source pieces summed, target pieces averaged.

    Word ids give, for each piece, the index of the word it belongs to (0-based, non-decreasing), or -1 for a special
    token that belongs to no word. ``None`` means pieces are words already.
    """
    if source_word_ids is not None:
        weights = _group(weights, source_word_ids, weights.dim() - 1, "sum")
    if target_word_ids is not None:
        weights = _group(weights, target_word_ids, weights.dim() - 2, "mean")
    return weights


def word_ids_from_pieces(pieces: Sequence[str], *, word_start: str = "\u2581",
                         special: Iterable[str] = ("<s>", "</s>", "<pad>", "<unk>")) -> torch.Tensor:
    """(N,) int64 word index of each SentencePiece piece: a piece starting with ``word_start`` ("▁") opens a word.

    Special pieces get -1. A first piece without the marker still opens word 0.
    """
    special = set(special)
    ids, word = [], -1
    for piece in pieces:
        if piece in special:
            ids.append(-1)
            continue
        if piece.startswith(word_start) or word < 0:
            word += 1
        ids.append(word)
    return torch.tensor(ids, dtype=torch.int64)


def links_from_attention(weights: torch.Tensor) -> set[Link]:
    """Arg-max alignment of (T, S) weights: one ``(source_index, target_index)`` link per target row with any weight."""
    if weights.dim() != 2:
        raise ValueError(f"weights must be (T, S) after averaging heads, got {tuple(weights.shape)}")
    best = weights.argmax(dim=1)
    has_weight = weights.sum(dim=1) > 0
    return {(int(best[t]), t) for t in range(weights.shape[0]) if has_weight[t]}


def diagonal_links(german_length: int, english_length: int) -> set[Link]:
    """A trivial baseline aligner along the diagonal: English word ``t`` of ``E`` is linked to German word
    ``floor((t + 0.5) * G / E)`` of ``G``, the one under its centre. Links are 0-based
    ``(german_index, english_index)``."""
    if german_length < 1 or english_length < 1:
        raise ValueError(f"both sentences need a word, got lengths {german_length} and {english_length}")
    return {((2 * t + 1) * german_length // (2 * english_length), t) for t in range(english_length)}


def diagonal_scores(gold: Sequence[GoldAlignment], *, source_language: str = "de") -> AlignmentScores:
    """The trivial diagonal aligner in a model's place (:func:`diagonal_links`): one link per *target* word, as the
    arg-max of a model force-decoding from ``source_language`` ("de" or "en") gives; the reference any attention
    alignment must beat to say more than "words keep their order"."""
    if source_language not in ("de", "en"):
        raise ValueError(f"source_language must be 'de' or 'en', got {source_language!r}")
    hypotheses = [diagonal_links(len(pair.german), len(pair.english)) if source_language == "de"
                  else {(german, english) for english, german in diagonal_links(len(pair.english), len(pair.german))}
                  for pair in gold]
    return alignment_scores(hypotheses, [pair.sure for pair in gold], [pair.possible for pair in gold])


def align_with_model(attention_fn: AttentionFn, gold: Sequence[GoldAlignment], *, source_language: str = "de",
                     layer: int = -2) -> AlignmentScores:
    """Force-decodes every gold pair with ``attention_fn`` and scores arg-max links of one layer's mean head.

    Protocol: ``attention_fn(source_tokens, target_tokens)`` receives the gold sentence pair as word lists (source side
    first), runs the model with the target teacher-forced, and returns a dict with

    * ``"cross_attention"``: (L, H, T, S) cross-attention weights of every decoder layer (or (H, T, S) for one layer),
      row ``t`` the distribution used to predict target piece ``t``;
    * optional ``"source_word_ids"`` (S,) and ``"target_word_ids"`` (T,) int64: word index of each piece, -1 for special
      tokens (see :func:`word_ids_from_pieces`). Without them pieces must be the words.

    ``source_language`` is ``"de"`` (German source, as the gold order) or ``"en"`` (English source; links are swapped
    back to (German, English)). ``layer`` indexes the L axis; the paper uses the penultimate layer (-2).
    """
    if source_language not in ("de", "en"):
        raise ValueError(f"source_language must be 'de' or 'en', got {source_language!r}")
    hypotheses = []
    for pair in gold:
        source, target = (pair.german, pair.english) if source_language == "de" else (pair.english, pair.german)
        out = attention_fn(list(source), list(target))
        cross = out["cross_attention"]
        cross = cross[layer] if cross.dim() == 4 else cross  # (H, T, S)
        words = piece_to_word_attention(cross.double().mean(dim=0), source_word_ids=out.get("source_word_ids"),
                                        target_word_ids=out.get("target_word_ids"))  # (T_words, S_words)
        if words.shape != (len(target), len(source)):
            raise ValueError(f"attention over words has shape {tuple(words.shape)}, expected "
                             f"({len(target)}, {len(source)}) = (target words, source words)")
        links = links_from_attention(words)
        hypotheses.append(links if source_language == "de" else {(t, s) for s, t in links})
    return alignment_scores(hypotheses, [p.sure for p in gold], [p.possible for p in gold])
