"""What raw text needs before a model's SentencePiece model, and what the model's outputs need after it.

A source sentence went through two word-level stages before SentencePiece during training: the corpus's own (how its
local files were made from raw text: :attr:`CorpusSpec.preprocessing`, e.g. IWSLT14 is Moses-tokenised and
lowercased) and then ``prepare``'s (``data.moses_tokenize``, ``data.lowercase``). New raw text gets both, in that
order. An output is Moses-detokenised when a stage tokenised the target side (or the run set ``eval.detokenize =
"moses"``); lowercasing and unsupported steps cannot be undone and are listed in :attr:`Postprocessing.not_restored`.

Both are stored declaratively (plain JSON) in an exported model's ``config.json``: no code is pickled.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from mma_nmt.data.preprocess import TextPipeline

_STEP_KEYS = ("moses_tokenize", "lowercase", "escape")


def _step(values: dict) -> dict:
    return {key: bool(values.get(key, False)) for key in _STEP_KEYS}


@dataclass(frozen=True)
class Preprocessing:
    """The word-level steps, in order, that raw source text needs (each ``{"moses_tokenize", "lowercase",
    "escape"}``). ``unsupported``: a step of the corpus this library cannot apply (raw text is then refused)."""

    lang: str
    steps: tuple[dict, ...] = ()
    unsupported: str = ""

    def __call__(self, texts: list[str]) -> list[str]:
        """``texts`` as the model's SentencePiece model expects them; refuses (ValueError) raw text of a corpus made
        with a step it cannot apply."""
        if self.unsupported:
            raise ValueError(f"the model's corpus made its {self.lang} text with {self.unsupported}, which "
                             f"mma_nmt cannot apply to raw text: apply it yourself and pass the result as "
                             f"already preprocessed (--preprocessed, or translate(..., preprocessed=True))")
        for step in self.steps:
            texts = TextPipeline(self.lang, **step).apply(texts)
        return list(texts)

    def as_dict(self) -> dict:
        return {"lang": self.lang, "steps": [dict(step) for step in self.steps], "unsupported": self.unsupported}

    @classmethod
    def from_dict(cls, values: dict) -> "Preprocessing":
        return cls(lang=values["lang"], steps=tuple(_step(s) for s in values.get("steps", ())),
                   unsupported=values.get("unsupported") or "")


@dataclass(frozen=True)
class Postprocessing:
    """What turns a SentencePiece-decoded output into plain text: Moses detokenisation (``unescape``: of HTML
    escapes too) when ``moses_detokenize``. ``not_restored``: what stays as the corpus had it (e.g. "lowercased")."""

    lang: str
    moses_detokenize: bool = False
    unescape: bool = False
    not_restored: tuple[str, ...] = field(default=())

    def __call__(self, texts: list[str]) -> list[str]:
        if not self.moses_detokenize:
            return list(texts)
        pipeline = TextPipeline(self.lang, moses_tokenize=True, escape=self.unescape)
        return [pipeline.postprocess(text) for text in texts]

    def as_dict(self) -> dict:
        return {**asdict(self), "not_restored": list(self.not_restored)}

    @classmethod
    def from_dict(cls, values: dict) -> "Postprocessing":
        return cls(lang=values["lang"], moses_detokenize=bool(values.get("moses_detokenize")),
                   unescape=bool(values.get("unescape")), not_restored=tuple(values.get("not_restored", ())))


def _stages(corpus_step: dict, data: dict) -> tuple[list[dict], str]:
    """The non-empty steps (corpus first, then prepare's) and the unsupported step of one language."""
    steps = [] if "unsupported" in corpus_step else [_step(corpus_step)]
    steps.append(_step({"moses_tokenize": data.get("moses_tokenize"), "lowercase": data.get("lowercase")}))
    return [s for s in steps if s["moses_tokenize"] or s["lowercase"]], corpus_step.get("unsupported", "")


@dataclass(frozen=True)
class TextProcessing:
    """The three word-level conversions of a model: raw source text in, raw target text in (a reference or a forced
    target, e.g. for :meth:`mma_nmt.Translator.attention`), and outputs back to plain text."""

    source: Preprocessing
    target: Preprocessing
    output: Postprocessing

    def as_dict(self) -> dict:
        return {"source_preprocessing": self.source.as_dict(), "target_preprocessing": self.target.as_dict(),
                "target_postprocessing": self.output.as_dict()}

    @classmethod
    def from_dict(cls, values: dict) -> "TextProcessing":
        return cls(Preprocessing.from_dict(values["source_preprocessing"]),
                   Preprocessing.from_dict(values["target_preprocessing"]),
                   Postprocessing.from_dict(values["target_postprocessing"]))


def text_processing(corpus: str, data: dict, *, eval_detokenize: str = "none") -> TextProcessing:
    """The :class:`TextProcessing` of a run on ``corpus`` prepared with the ``[data]`` settings ``data`` (a dict of
    :class:`~mma_nmt.data.prepare.PrepareConfig` fields; only ``moses_tokenize`` and ``lowercase`` matter)."""
    from mma_nmt.data.corpora import get_corpus

    spec = get_corpus(corpus)
    src_steps, src_unsupported = _stages(spec.preprocessing.get(spec.src_lang, {}), data)
    tgt_steps, tgt_unsupported = _stages(spec.preprocessing.get(spec.tgt_lang, {}), data)
    tokenised = any(s["moses_tokenize"] for s in tgt_steps)
    not_restored = (["lowercased"] if any(s["lowercase"] for s in tgt_steps) else []) + \
        ([tgt_unsupported] if tgt_unsupported else [])
    output = Postprocessing(spec.tgt_lang, moses_detokenize=tokenised or eval_detokenize == "moses",
                            unescape=any(s["escape"] for s in tgt_steps), not_restored=tuple(not_restored))
    return TextProcessing(Preprocessing(spec.src_lang, tuple(src_steps), src_unsupported),
                          Preprocessing(spec.tgt_lang, tuple(tgt_steps), tgt_unsupported), output)
