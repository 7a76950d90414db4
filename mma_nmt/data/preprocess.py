"""Optional word-level preprocessing before subword segmentation: Moses tokenisation and lowercasing (sacremoses).

Some paper protocols (e.g. IWSLT14 De-En as prepared by fairseq) compute BLEU on Moses-tokenized lowercased text; the
raw corpora need the same treatment to be comparable. :meth:`TextPipeline.postprocess` undoes the tokenisation of a
system output (lowercasing cannot be undone).
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

from tqdm import tqdm

_PARALLEL_MIN = 20_000  # below this, starting worker processes costs more than it saves


@dataclass(frozen=True)
class TextPipeline:
    """Moses tokenisation (``moses_tokenize``) and/or lowercasing (``lowercase``) of one language's text.

    ``escape`` keeps Moses's HTML escaping of ``& < > ' "`` (``&apos;`` ...); it is off by default because subword
    models do not need it, on for protocols whose references are escaped.
    """

    lang: str
    moses_tokenize: bool = False
    lowercase: bool = False
    escape: bool = False

    @property
    def identity(self) -> bool:
        return not (self.moses_tokenize or self.lowercase)

    @cached_property
    def _tokenizer(self):
        from sacremoses import MosesTokenizer
        return MosesTokenizer(lang=self.lang)

    @cached_property
    def _detokenizer(self):
        from sacremoses import MosesDetokenizer
        return MosesDetokenizer(lang=self.lang)

    def __call__(self, text: str) -> str:
        """The preprocessed ``text``."""
        if self.moses_tokenize:
            text = self._tokenizer.tokenize(text, escape=self.escape, return_str=True)
        if self.lowercase:
            text = text.lower()
        return text

    def apply(self, texts: Sequence[str], *, progress: bool = False, workers: int = 1) -> list[str]:
        """:meth:`__call__` over many sentences, in ``workers`` processes for large inputs (order kept)."""
        if self.identity:
            return list(texts)
        if workers > 1 and len(texts) >= _PARALLEL_MIN:
            with multiprocessing.Pool(workers) as pool:
                mapped = pool.imap(self, texts, chunksize=1000)
                return list(tqdm(mapped, total=len(texts), desc=f"preprocess {self.lang}", unit=" lines",
                                 disable=not progress, mininterval=1.0, leave=False))
        return [self(text) for text in tqdm(texts, desc=f"preprocess {self.lang}", unit=" lines",
                                            disable=not progress or len(texts) < 10_000, mininterval=1.0,
                                            leave=False)]

    def postprocess(self, text: str) -> str:
        """Turns a system output back into plain text: Moses detokenisation when the pipeline tokenizes."""
        if self.moses_tokenize:
            return self._detokenizer.detokenize(text.split(), unescape=self.escape)
        return text

    def __getstate__(self) -> dict:  # cached sacremoses objects are rebuilt on demand
        return {"lang": self.lang, "moses_tokenize": self.moses_tokenize, "lowercase": self.lowercase,
                "escape": self.escape}

    def __setstate__(self, state: dict) -> None:
        for key, value in state.items():
            object.__setattr__(self, key, value)
