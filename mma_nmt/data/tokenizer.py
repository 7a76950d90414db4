"""SentencePiece subword models: training (BPE or unigram) and a small wrapper with fixed special ids.

Every model trained here has ``pad=0, bos=1, eos=2, unk=3`` on both sides, so batches need no per-side special ids.
"""

from __future__ import annotations

import hashlib
import io
import os
import typing
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import sentencepiece as spm

from mma_nmt.config_io import check_choices

PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3
ModelType = Literal["bpe", "unigram"]
MODEL_TYPES = typing.get_args(ModelType)


@dataclass(frozen=True)
class SentencePieceConfig:
    """Training options of one SentencePiece model.

    Attributes:
        vocab_size: the number of pieces, specials included. With ``hard_vocab_limit=False`` a corpus too small for it
            gets a smaller vocabulary instead of an error (the size reached is in ``Tokenizer.vocab_size``).
        model_type: ``"bpe"`` or ``"unigram"``.
        character_coverage: share of characters covered by pieces (1.0 for alphabetic scripts, 0.9995 for ja/zh).
        input_sentence_size: sample at most this many sentences for training (0 = all); useful for WMT-sized corpora.
        seed_sentencepiece_size, num_threads: passed through.
    """

    vocab_size: int = 8000
    model_type: ModelType = "bpe"
    character_coverage: float = 1.0
    input_sentence_size: int = 2_000_000
    hard_vocab_limit: bool = False
    num_threads: int = 2

    def __post_init__(self):
        check_choices("", self)


def train_sentencepiece(sentences: Iterable[str], config: SentencePieceConfig) -> bytes:
    """Trains a SentencePiece model on ``sentences`` and returns the serialized model (write it with an atomic write).

    Raises ValueError for an unknown model type, an empty corpus or a vocabulary smaller than the 4 specials.
    """
    if config.vocab_size <= 4:
        raise ValueError(f"vocab_size must exceed the 4 special pieces, got {config.vocab_size}")
    sentences = [s for s in sentences if s]
    if not sentences:
        raise ValueError("cannot train a SentencePiece model on an empty corpus")
    model = io.BytesIO()
    try:
        _run_trainer(sentences, model, config)
    except RuntimeError as error:
        if "smaller than required_chars" in str(error):
            raise ValueError(
                f"vocab_size={config.vocab_size} is too small for the characters of this corpus at "
                f"character_coverage={config.character_coverage} ({error}); raise vocab_size or lower "
                f"character_coverage") from error
        raise
    return model.getvalue()


def _run_trainer(sentences: list[str], model: io.BytesIO, config: SentencePieceConfig) -> None:
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences), model_writer=model,
        vocab_size=config.vocab_size, model_type=config.model_type,
        character_coverage=config.character_coverage, hard_vocab_limit=config.hard_vocab_limit,
        input_sentence_size=config.input_sentence_size, shuffle_input_sentence=True,
        num_threads=config.num_threads, pad_id=PAD_ID, bos_id=BOS_ID, eos_id=EOS_ID, unk_id=UNK_ID,
        pad_piece="<pad>", bos_piece="<s>", eos_piece="</s>", unk_piece="<unk>",
        max_sentence_length=1 << 16, minloglevel=2,
    )


class Tokenizer:
    """A SentencePiece model with ids ``pad=0, bos=1, eos=2, unk=3``.

    ``encode`` gives ids without BOS/EOS; ``decode`` drops pad/bos/eos. Picklable (for DataLoader workers).
    """

    pad_id: int = PAD_ID
    bos_id: int = BOS_ID
    eos_id: int = EOS_ID
    unk_id: int = UNK_ID

    def __init__(self, model_proto: bytes, path: Path | None = None):
        self._proto = model_proto
        self.path = path
        self._sp = spm.SentencePieceProcessor()
        self._sp.LoadFromSerializedProto(model_proto)
        self._check_specials()

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Tokenizer":
        """Loads a ``.model`` file written by :func:`train_sentencepiece` (or any model with the same special ids)."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no SentencePiece model file")
        return cls(path.read_bytes(), path)

    def _check_specials(self) -> None:
        found = (self._sp.pad_id(), self._sp.bos_id(), self._sp.eos_id(), self._sp.unk_id())
        if found != (PAD_ID, BOS_ID, EOS_ID, UNK_ID):
            where = self.path or "model"
            raise ValueError(f"{where}: special ids (pad, bos, eos, unk) are {found}, expected (0, 1, 2, 3); "
                             f"train it with mma_nmt.data.tokenizer.train_sentencepiece")

    @property
    def vocab_size(self) -> int:
        return self._sp.get_piece_size()

    def encode(self, text: str) -> list[int]:
        """Subword ids of ``text``, without BOS/EOS."""
        return self._sp.encode(text, out_type=int)

    def encode_batch(self, texts: Sequence[str], num_threads: int = 2) -> list[list[int]]:
        """:meth:`encode` of many sentences at once (multi-threaded inside SentencePiece)."""
        return self._sp.encode(list(texts), out_type=int, num_threads=num_threads)

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids`` with pad/bos/eos dropped (unknown pieces come out as ``⁇``)."""
        specials = (PAD_ID, BOS_ID, EOS_ID)
        return self._sp.decode([int(i) for i in ids if int(i) not in specials])

    def pieces(self, text: str) -> list[str]:
        """The subword pieces of ``text`` (for inspection)."""
        return self._sp.encode(text, out_type=str)

    def id_to_piece(self, index: int) -> str:
        return self._sp.id_to_piece(int(index))

    def serialized(self) -> bytes:
        """The model file's bytes."""
        return self._proto

    @property
    def fingerprint(self) -> str:
        """sha256 of the model's bytes: checkpoints record it, so a model is never run with another vocabulary."""
        return hashlib.sha256(self._proto).hexdigest()

    def __getstate__(self) -> dict:
        return {"proto": self._proto, "path": self.path}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["proto"], state["path"])

    def __repr__(self) -> str:
        return f"Tokenizer(path={str(self.path)!r}, vocab_size={self.vocab_size})"
