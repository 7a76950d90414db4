"""Corpus scores with sacreBLEU: detokenised BLEU with its signature, tokenised BLEU as the papers report it
(Moses-tokenised text, no further tokenisation, multi-bleu style), TER and chrF."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from sacrebleu.metrics import BLEU, CHRF, TER


@dataclass
class Scores:
    bleu: float
    bleu_signature: str
    chrf: float
    ter: float
    tokenized_bleu: float | None = None
    chrf_name: str = "chrF2"  # sacreBLEU's name of the chrF variant: "chrF2", or "chrF2++" for chrF++
    chrf_signature: str = ""
    details: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"bleu": self.bleu, "bleu_signature": self.bleu_signature, "tokenized_bleu": self.tokenized_bleu,
                "chrf": self.chrf, "chrf_name": self.chrf_name, "chrf_signature": self.chrf_signature, "ter": self.ter,
                **self.details}


@lru_cache(maxsize=8)
def _moses(lang: str):
    from sacremoses import MosesDetokenizer, MosesTokenizer
    return MosesTokenizer(lang=lang), MosesDetokenizer(lang=lang)


def moses_tokenize(lines: list[str], lang: str) -> list[str]:
    tokenizer, _ = _moses(lang)
    return [tokenizer.tokenize(line, return_str=True, escape=False) for line in lines]


def moses_detokenize(lines: list[str], lang: str) -> list[str]:
    _, detokenizer = _moses(lang)
    return [detokenizer.detokenize(line.split()) for line in lines]


def _check(hypotheses: list[str], references: list[str]) -> None:
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    if not hypotheses:
        raise ValueError("nothing to score: no hypotheses and no references")


def corpus_bleu(hypotheses: list[str], references: list[str], *, tokenize: str = "13a") -> tuple[float, str]:
    """sacreBLEU's detokenised BLEU (its default tokenisation 13a, or ``tokenize``: "ja-mecab" for Japanese, ...) and
    its signature."""
    _check(hypotheses, references)
    metric = BLEU(tokenize=tokenize)
    return metric.corpus_score(hypotheses, [references]).score, str(metric.get_signature())


def tokenized_bleu(hypotheses: list[str], references: list[str], lang: str) -> float:
    """BLEU on Moses-tokenised hypotheses and references with sacreBLEU's ``tokenize="none"``."""
    _check(hypotheses, references)
    metric = BLEU(tokenize="none", force=True)
    return metric.corpus_score(moses_tokenize(hypotheses, lang), [moses_tokenize(references, lang)]).score


def score_corpus(hypotheses: list[str], references: list[str], *, lang: str = "en",
                 with_tokenized: bool = True, tokenize: str = "13a", chrf_word_order: int = 0) -> Scores:
    """All scores of one system against one reference per sentence (``tokenize``: sacreBLEU's tokenizer of BLEU;
    ``chrf_word_order``: 0 for chrF, 2 for chrF++)."""
    bleu, signature = corpus_bleu(hypotheses, references, tokenize=tokenize)
    chrf_metric = CHRF(word_order=chrf_word_order)
    chrf = chrf_metric.corpus_score(hypotheses, [references])
    ter = TER().corpus_score(hypotheses, [references]).score
    tok = tokenized_bleu(hypotheses, references, lang) if with_tokenized else None
    return Scores(bleu=bleu, bleu_signature=signature, chrf=chrf.score, ter=ter, tokenized_bleu=tok,
                  chrf_name=chrf.name, chrf_signature=str(chrf_metric.get_signature()))
