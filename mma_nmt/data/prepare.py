"""Corpus preparation: parallel text in, SentencePiece models and binarised splits out.

``prepare(PrepareConfig(...))`` writes into ``out_dir``:

- ``spm_src.model``, ``spm_tgt.model``: the subword models (identical bytes when ``joint_vocab``);
- ``<split>.src.pt``, ``<split>.tgt.pt``: token ids (see :func:`mma_nmt.data.dataset.save_ids`);
- ``<split>.src.txt``, ``<split>.tgt.txt``: the raw text of the same examples (references for BLEU);
- ``meta.json``: the config, corpus facts, vocabulary and split statistics, read reports and stage fingerprints.

Every file is written atomically. A stage (subword training, each split) whose inputs and settings are unchanged since
the last run is skipped, so ``prepare`` is idempotent and resumes after an interruption.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from tqdm import tqdm

from mma_nmt.config_io import check_choices, from_dict, load_file, require_at_least
from mma_nmt.data.corpora import CorpusSpec, default_data_dir, get_corpus
from mma_nmt.data.dataset import save_ids
from mma_nmt.data.fileio import atomic_write_bytes, atomic_write_json, atomic_write_lines
from mma_nmt.data.preprocess import TextPipeline
from mma_nmt.data.reader import DEFAULT_MAX_LINE_CHARS, OnError, ParallelText, read_parallel
from mma_nmt.data.sources import fetch_corpus
from mma_nmt.data.tokenizer import ModelType, SentencePieceConfig, Tokenizer, train_sentencepiece

log = logging.getLogger(__name__)
META_VERSION = 1
_CJK = {"ja", "zh", "ko"}


@dataclass
class PrepareConfig:
    """What to prepare and how.

    Attributes:
        corpus: a key of :data:`mma_nmt.data.corpora.CORPORA`.
        data_dir: where corpora are read from (default :func:`default_data_dir`).
        out_dir: the prepared directory.
        vocab_size, model_type: SentencePiece vocabulary size and ``"bpe"``/``"unigram"``.
        joint_vocab: one model trained on both sides (written twice) instead of one per side.
        moses_tokenize, lowercase: word-level preprocessing before subwords (see :mod:`mma_nmt.data.preprocess`).
        max_train_lines: use only the first lines of the training split (quick experiments and tests).
        on_error: ``"skip"`` or ``"fail"`` for malformed lines (see :mod:`mma_nmt.data.reader`).
        download: fetch missing splits from the original public location into ``download_dir``.
        max_len: training pairs with more subwords than this on either side are dropped (valid/test are kept whole).
        splits: the splits to prepare (default: all of the corpus); ``spm_train_split`` is always included.
        spm_train_split: the split the subword models are trained on.
        character_coverage: SentencePiece coverage (default 0.9995 when a side is ja/zh/ko, else 1.0).
        max_line_chars: longer lines are malformed (``line_too_long``).
        download_dir: where downloads and built files go (default: ``data_dir``); also searched for the corpus.
        mirror: a mirror replacing the original hosts (see :mod:`mma_nmt.data.download`).
        progress: tqdm progress bars.
        workers: threads for SentencePiece training/encoding and processes for Moses tokenisation of large splits.

    A run config's ``[data]`` table is read by :meth:`from_section`, which remembers the settings the table gives
    (:meth:`given_settings`): the others are the prepared folder's (:mod:`mma_nmt.data.prepared_settings`), and
    :meth:`to_section` writes the table back as it was given.
    """

    _given: ClassVar[frozenset[str] | None] = None  # set per instance by from_section; None: every setting

    corpus: str = "multi30k_de_en"
    data_dir: str | None = None
    out_dir: str = "runs/data/multi30k_de_en"
    vocab_size: int = 8000
    model_type: ModelType = "bpe"
    joint_vocab: bool = True
    moses_tokenize: bool = False
    lowercase: bool = False
    max_train_lines: int | None = None
    on_error: OnError = "skip"
    download: bool = False
    max_len: int = 256
    splits: tuple[str, ...] | None = None
    spm_train_split: str = "train"
    character_coverage: float | None = None
    max_line_chars: int = DEFAULT_MAX_LINE_CHARS
    download_dir: str | None = None
    mirror: str | None = None
    progress: bool = True
    workers: int = 2

    @classmethod
    def from_dict(cls, values: dict) -> "PrepareConfig":
        """Builds a config from a mapping (e.g. a parsed TOML/JSON section); unknown keys raise ValueError."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown PrepareConfig keys {unknown}; known keys: {sorted(known)}")
        values = dict(values)
        if values.get("splits") is not None:
            values["splits"] = tuple(values["splits"])
        return cls(**values)

    @classmethod
    def from_section(cls, values: dict, where: str = "data") -> "PrepareConfig":
        """Builds and validates a config from a run config's ``[data]`` table, as every other section is read: an
        unknown key, a value of the wrong type or out of range raises ValueError naming ``data.<key>``."""
        config = from_dict(cls, values, where)
        config.validate()
        config._given = frozenset(values)
        return config

    def given_settings(self) -> frozenset[str]:
        """The settings a run config's ``[data]`` gave (those :meth:`from_section` read); every setting of a config
        built otherwise."""
        if self._given is None:
            return frozenset(f.name for f in dataclasses.fields(self))
        return self._given

    def to_section(self) -> dict:
        """The ``[data]`` table of a run config: the given settings (:meth:`given_settings`) as plain values (lists,
        not tuples), so that :meth:`from_section` reads back an equal config with the same given settings."""
        given = self.given_settings()
        return {key: list(value) if isinstance(value, tuple) else value
                for key, value in dataclasses.asdict(self).items() if key in given}

    def corpus_roots(self) -> list[Path]:
        """The data directories the corpus is looked for in: ``data_dir`` (default :func:`default_data_dir`), then
        ``download_dir`` when it is another one."""
        data_dir = Path(self.data_dir) if self.data_dir else default_data_dir()
        download_dir = Path(self.download_dir) if self.download_dir else data_dir
        return [data_dir] if download_dir == data_dir else [data_dir, download_dir]

    @classmethod
    def from_file(cls, path: str | os.PathLike, section: str | None = None) -> "PrepareConfig":
        """Reads a ``.json``, ``.toml`` or ``.yaml`` file (optionally one table of it, e.g. ``section="data"``)."""
        path = Path(path)
        values = load_file(path)
        if section is not None:
            if section not in values:
                raise KeyError(f"{path}: no [{section}] section")
            values = values[section]
        return cls.from_dict(values)

    def validate(self) -> None:
        """Raises ValueError for an invalid setting, naming it."""
        try:
            get_corpus(self.corpus)
        except KeyError as error:
            raise ValueError(f"data.corpus: {error.args[0]}") from None
        check_choices("data", self)
        require_at_least("data", self, vocab_size=5, max_len=1, max_line_chars=1, workers=0)
        if self.max_train_lines is not None and self.max_train_lines <= 0:
            raise ValueError(f"data.max_train_lines must be positive or absent, got {self.max_train_lines}")
        if self.character_coverage is not None and not 0 < self.character_coverage <= 1:
            raise ValueError(f"data.character_coverage must be in (0, 1], got {self.character_coverage}")


def _digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _file_identity(path: Path) -> list:
    stat = path.stat()
    return [str(path.resolve()), stat.st_size, stat.st_mtime_ns]


def locate_splits(config: PrepareConfig, splits: list[str]) -> dict[str, tuple[Path, Path]]:
    """The (src, tgt) files of each of ``splits`` of ``config.corpus`` under its data directories; downloads missing
    ones when ``config.download``, else raises naming what is missing and where it was looked for."""
    spec, roots = get_corpus(config.corpus), config.corpus_roots()
    found = spec.locate(splits, roots)
    missing = [split for split in splits if split not in found]
    if missing and config.download:
        fetch_corpus(spec, roots[-1], mirror=config.mirror, progress=config.progress)
        found.update(spec.locate(missing, [roots[-1]]))
        still = [split for split in missing if split not in found]
        if still:
            raise FileNotFoundError(f"{spec.name}: download finished but splits {still} are still missing")
    elif missing:
        raise FileNotFoundError(
            f"{spec.name}: splits {missing} not found in {spec.folder(roots[0])} (expected "
            f"{spec.expected_files(missing)}). Set download=True to fetch them from the original source, point "
            f"MMA_NMT_DATA_DIR/data_dir at a copy, or choose other splits with splits=... and spm_train_split=... . "
            f"Corpus note: {spec.note}")
    return found


class _Preparer:
    """The state of one ``prepare`` run (kept out of the public API)."""

    def __init__(self, config: PrepareConfig):
        config.validate()
        self.config = config
        self.spec: CorpusSpec = get_corpus(config.corpus)
        self.out = Path(config.out_dir)
        self.roots = config.corpus_roots()
        self.data_dir, self.download_dir = self.roots[0], self.roots[-1]
        wanted = list(config.splits) if config.splits is not None else list(self.spec.splits)
        if config.spm_train_split not in wanted:
            wanted.insert(0, config.spm_train_split)
        for split in wanted:
            self.spec.files(split, self.data_dir)  # raises KeyError naming the known splits
        self.splits = wanted
        self.pipelines = {side: TextPipeline(lang, config.moses_tokenize, config.lowercase)
                          for side, lang in (("src", self.spec.src_lang), ("tgt", self.spec.tgt_lang))}
        self.meta = self._load_meta()
        self.texts: dict[str, ParallelText] = {}
        self._processed: dict[tuple[str, int], list[str]] = {}

    def _load_meta(self) -> dict:
        path = self.out / "meta.json"
        if path.is_file():
            try:
                meta = json.loads(path.read_text(encoding="utf-8"))
                if meta.get("version") == META_VERSION:
                    return meta
            except json.JSONDecodeError:
                log.warning("%s is not valid JSON; preparing from scratch", path)
        return {"version": META_VERSION, "stages": {}, "splits": {}, "reports": {}}

    def locate(self) -> dict[str, tuple[Path, Path]]:
        """The (src, tgt) files of every wanted split (:func:`locate_splits`)."""
        return locate_splits(self.config, self.splits)

    def read(self, split: str, files: tuple[Path, Path]) -> ParallelText:
        """The split's text (read once per run), with its report recorded in the metadata."""
        if split not in self.texts:
            limit = self.config.max_train_lines if split == "train" else None
            text = read_parallel(files[0], files[1], on_error=self.config.on_error, max_lines=limit,
                                 max_line_chars=self.config.max_line_chars, progress=self.config.progress)
            if not text.report.clean:
                log.warning("%s: %s", split, text.report.summary())
            self.meta["reports"][split] = text.report.to_dict()
            self.texts[split] = text
        return self.texts[split]

    def preprocess(self, side: str, texts: list[str]) -> list[str]:
        """The word-level pipeline of ``side`` over ``texts`` (cached per list, so train is processed once)."""
        key = (side, id(texts))
        if key not in self._processed:
            self._processed[key] = self.pipelines[side].apply(texts, progress=self.config.progress,
                                                              workers=self.config.workers)
        return self._processed[key]

    def spm_fingerprint(self, files: dict[str, tuple[Path, Path]]) -> str:
        c = self.config
        split = c.spm_train_split
        return _digest({"inputs": [_file_identity(p) for p in files[split]], "split": split,
                        "limit": c.max_train_lines if split == "train" else None, "vocab": c.vocab_size,
                        "type": c.model_type, "joint": c.joint_vocab, "moses": c.moses_tokenize, "lower": c.lowercase,
                        "on_error": c.on_error, "chars": c.max_line_chars, "coverage": self.coverage()})

    def coverage(self) -> float:
        if self.config.character_coverage is not None:
            return self.config.character_coverage
        return 0.9995 if {self.spec.src_lang, self.spec.tgt_lang} & _CJK else 1.0

    def train_tokenizers(self, files: dict[str, tuple[Path, Path]], fingerprint: str) -> None:
        """Trains and writes ``spm_src.model``/``spm_tgt.model``."""
        text = self.read(self.config.spm_train_split, files[self.config.spm_train_split])
        src = self.preprocess("src", text.src)
        tgt = self.preprocess("tgt", text.tgt)
        sp_config = SentencePieceConfig(vocab_size=self.config.vocab_size, model_type=self.config.model_type,
                                        character_coverage=self.coverage(), num_threads=max(self.config.workers, 1))
        log.info("training %s SentencePiece (%s, vocab %d) on %d pairs", "a joint" if self.config.joint_vocab
                 else "two", self.config.model_type, self.config.vocab_size, len(src))
        if self.config.joint_vocab:
            model_src = model_tgt = train_sentencepiece(src + tgt, sp_config)
        else:
            model_src, model_tgt = train_sentencepiece(src, sp_config), train_sentencepiece(tgt, sp_config)
        atomic_write_bytes(self.out / "spm_src.model", model_src)
        atomic_write_bytes(self.out / "spm_tgt.model", model_tgt)
        self.meta["stages"] = {"spm": fingerprint}  # every split must be re-encoded with the new models
        self.save_meta()

    def split_fingerprint(self, split: str, files: tuple[Path, Path], spm_fp: str) -> str:
        c = self.config
        train = split == "train"
        return _digest({"spm": spm_fp, "inputs": [_file_identity(p) for p in files], "split": split,
                        "limit": c.max_train_lines if train else None, "max_len": c.max_len if train else None,
                        "moses": c.moses_tokenize, "lower": c.lowercase, "on_error": c.on_error,
                        "chars": c.max_line_chars})

    def save_meta(self) -> None:
        atomic_write_json(self.out / "meta.json", self.meta)


def _split_outputs(out: Path, split: str) -> list[Path]:
    return [out / f"{split}.{side}.{ext}" for side in ("src", "tgt") for ext in ("pt", "txt")]


def _length_stats(ids: list[list[int]], unk_id: int) -> dict:
    tokens = sum(len(x) for x in ids)
    unk = sum(x.count(unk_id) for x in ids)
    return {"tokens": tokens, "mean_len": round(tokens / max(len(ids), 1), 2),
            "max_len": max((len(x) for x in ids), default=0), "unk_rate": round(unk / max(tokens, 1), 6)}


def _binarise(prep: _Preparer, split: str, files: tuple[Path, Path], tokenizers: dict[str, Tokenizer]) -> None:
    """Encodes one split, filters over-long training pairs, writes its four files and records statistics."""
    text = prep.read(split, files)
    ids = {side: tokenizers[side].encode_batch(prep.preprocess(side, getattr(text, side)),
                                               num_threads=max(prep.config.workers, 1))
           for side in ("src", "tgt")}
    keep = range(len(text))
    if split == "train":
        keep = [i for i in keep if len(ids["src"][i]) <= prep.config.max_len and len(ids["tgt"][i]) <= prep.config.max_len]
    filtered = len(text) - len(keep)
    if not keep:  # a training run on it would find no batch; an evaluation, nothing to score
        raise ValueError(f"split {split!r} of {prep.out} would be empty: {text.report.pairs_read} pairs read, "
                         f"{text.report.pairs_skipped} malformed, {filtered} longer than data.max_len="
                         f"{prep.config.max_len} subword tokens; nothing written (raise data.max_len or check the "
                         f"corpus)")
    for side in ("src", "tgt"):
        kept_ids = [ids[side][i] for i in keep]
        save_ids(prep.out / f"{split}.{side}.pt", kept_ids)
        atomic_write_lines(prep.out / f"{split}.{side}.txt", [getattr(text, side)[i] for i in keep])
        ids[side] = kept_ids
    prep.meta["splits"][split] = {
        "stem": prep.spec.splits[split], "files": [str(p) for p in files], "examples": len(keep),
        "pairs_read": text.report.pairs_read, "skipped_malformed": text.report.pairs_skipped,
        "filtered_too_long": filtered,
        "src": _length_stats(ids["src"], tokenizers["src"].unk_id),
        "tgt": _length_stats(ids["tgt"], tokenizers["tgt"].unk_id)}
    log.info("%s: %d examples (%d malformed skipped, %d longer than %d dropped)", split, len(keep),
             text.report.pairs_skipped, filtered, prep.config.max_len)


def prepare(config: PrepareConfig) -> Path:
    """Prepares ``config.corpus`` into ``config.out_dir`` (see the module docstring) and returns that directory.

    Raises FileNotFoundError (missing splits, with what to do), DataFormatError (``on_error="fail"``, with file:line),
    ValueError (invalid config) or DownloadError.
    """
    started = time.perf_counter()
    prep = _Preparer(config)
    files = prep.locate()
    prep.out.mkdir(parents=True, exist_ok=True)
    spm_fp = prep.spm_fingerprint(files)
    models = [prep.out / "spm_src.model", prep.out / "spm_tgt.model"]
    # One bar over the stages (subword models, then each split); on a terminal only.
    stages = tqdm(total=1 + len(prep.splits), desc=f"preparing {prep.spec.name}", unit=" stage", leave=False,
                  disable=None if config.progress else True)
    if prep.meta["stages"].get("spm") != spm_fp or not all(p.is_file() for p in models):
        stages.set_postfix_str("subword models")
        prep.train_tokenizers(files, spm_fp)
    else:
        log.info("%s: subword models up to date", prep.out)
    stages.update()
    tokenizers = {"src": Tokenizer.load(models[0]), "tgt": Tokenizer.load(models[1])}
    for split in prep.splits:
        fingerprint = prep.split_fingerprint(split, files[split], spm_fp)
        stages.set_postfix_str(split)
        if prep.meta["stages"].get(f"split:{split}") == fingerprint and all(p.is_file()
                                                                             for p in _split_outputs(prep.out, split)):
            log.info("%s: split %s up to date", prep.out, split)
        else:
            _binarise(prep, split, files[split], tokenizers)
            prep.meta["stages"][f"split:{split}"] = fingerprint
            prep.save_meta()
        stages.update()
    stages.close()
    _finish_meta(prep, tokenizers, time.perf_counter() - started)
    return prep.out


def _finish_meta(prep: _Preparer, tokenizers: dict[str, Tokenizer], seconds: float) -> None:
    """Records the config, corpus facts and vocabulary statistics in ``meta.json``."""
    spec = prep.spec
    for key in ("splits", "reports"):
        prep.meta[key] = {s: v for s, v in prep.meta[key].items() if s in prep.splits}
    prep.meta.update({
        "config": dataclasses.asdict(prep.config),
        "corpus": {"name": spec.name, "src_lang": spec.src_lang, "tgt_lang": spec.tgt_lang,
                   "text_state": spec.text_state, "note": spec.note, "data_dir": str(prep.data_dir)},
        "preprocess": {"moses_tokenize": prep.config.moses_tokenize, "lowercase": prep.config.lowercase},
        "vocab": {"joint": prep.config.joint_vocab, "model_type": prep.config.model_type,
                  "requested_size": prep.config.vocab_size, "src_size": tokenizers["src"].vocab_size,
                  "tgt_size": tokenizers["tgt"].vocab_size, "pad_id": 0, "bos_id": 1, "eos_id": 2, "unk_id": 3},
        "last_run_seconds": round(seconds, 2),
    })
    prep.save_meta()
    log.info("prepared %s in %s (%.1f s)", spec.name, prep.out, seconds)


def pipeline_for(prepared_dir: str | os.PathLike, side: str = "tgt") -> TextPipeline:
    """The word-level pipeline a prepared directory used on ``side`` (``postprocess`` it to detokenize outputs)."""
    meta = json.loads((Path(prepared_dir) / "meta.json").read_text(encoding="utf-8"))
    lang = meta["corpus"]["src_lang" if side == "src" else "tgt_lang"]
    return TextPipeline(lang, meta["preprocess"]["moses_tokenize"], meta["preprocess"]["lowercase"])
