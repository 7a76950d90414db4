"""The known corpora: their language pair, standard splits, local folder and original public download location.

Local layout: split ``s`` of a corpus is the line-aligned pair ``<data_dir>/<local_folder>/<stem>.<lang>[.gz]`` with
``stem = spec.splits[s]``. The shared copies under ``shared/data`` use this layout, and :mod:`mma_nmt.data.sources`
builds it from the original downloads. This module is the one that knows it: :meth:`CorpusSpec.locate` finds the
files of any splits under several data directories in one call, :func:`text_file` finds one file of the layout.

Several references (NIST): a corpus with ``test_sets`` scores its test split set by set. The test split is those sets
concatenated in that order (its target file holds their first references); each set ``t`` also has its own files
``<t>.<src_lang>`` and ``<t>.<tgt_lang><i>`` for reference ``i = 0 .. references - 1`` (``mt03.en0`` .. ``mt03.en3``).
:meth:`CorpusSpec.reference_sets` reads them (:class:`~mma_nmt.data.reference_sets.ReferenceSet`) for
:func:`mma_nmt.evaluation.multi_reference.score_test_sets`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from mma_nmt.data.download import RemoteFile
from mma_nmt.data.fileio import read_text_lines
from mma_nmt.data.reader import DataFormatError, ParallelText, ReadReport, read_parallel  # noqa: F401  (re-exported)
from mma_nmt.data.reference_sets import ReferenceSet

__all__ = ["CorpusSpec", "CORPORA", "get_corpus", "default_data_dir", "text_file", "read_parallel", "ParallelText",
           "ReadReport", "DataFormatError", "DATA_DIR_ENV"]
DATA_DIR_ENV = "MMA_NMT_DATA_DIR"


def text_file(folder: Path, stem: str, lang: str) -> Path | None:
    """One file of the local layout: ``folder/stem.lang.gz`` or ``folder/stem.lang``, whichever exists first, else
    None."""
    for name in (f"{stem}.{lang}.gz", f"{stem}.{lang}"):
        candidate = Path(folder) / name
        if candidate.is_file():
            return candidate
    return None


@dataclass(frozen=True)
class CorpusSpec:
    """A parallel corpus in one translation direction.

    Attributes:
        name: the key in :data:`CORPORA`.
        src_lang, tgt_lang: language codes, also the file suffixes (``train.de.gz``).
        splits: split name -> file stem, e.g. ``{"train": "train", "valid": "val", "test": "test_2016_flickr"}``.
        local_folder: the corpus folder under the data directory.
        remote_files: the original public files that :mod:`mma_nmt.data.sources` downloads.
        builder: how ``sources`` turns the downloads into the local layout (``"direct"``, ``"iwslt14_fairseq"``,
            ``"iwslt17_wit3"``, ``"wmt_statmt"``; ``"manual"``: licensed or no longer served, placed by the user).
        text_state: what the text looks like in the local layout ("raw", "moses-tokenized lowercased", ...).
        note: protocol remarks (which paper setup the splits follow).
        test_sets: the stems of the test sets whose concatenation, in this order, is the test split; () = one set.
        references: references per test-set sentence (files ``<test_set>.<tgt_lang><i>``, see the module doc).
        preprocessing: per language, the word-level steps that made the local files from raw text (``{"de":
            {"moses_tokenize": True, "lowercase": True, "escape": True}}``), or ``{"unsupported": "<tool>"}`` for a
            step this library cannot apply; raw text to translate needs them too (:mod:`mma_nmt.data.text_processing`).
            A language not named is raw text.
    """

    name: str
    src_lang: str
    tgt_lang: str
    splits: dict[str, str]
    local_folder: str
    remote_files: tuple[RemoteFile, ...] = ()
    builder: str = "direct"
    text_state: str = "raw"
    note: str = ""
    test_sets: tuple[str, ...] = ()
    references: int = 1
    preprocessing: dict[str, dict] = field(default_factory=dict)

    def folder(self, data_dir: str | os.PathLike) -> Path:
        """The corpus folder under the data directory ``data_dir``."""
        return Path(data_dir) / self.local_folder

    def expected_files(self, splits: Iterable[str]) -> str:
        """The file names of ``splits`` in the corpus folder, for error messages: ``train.{de,en}[.gz], ...``."""
        return ", ".join(f"{self.splits[split]}.{{{self.src_lang},{self.tgt_lang}}}[.gz]" for split in splits)

    def files(self, split: str, data_dir: str | os.PathLike) -> tuple[Path | None, Path | None]:
        """The (src, tgt) files of ``split`` under ``data_dir`` (``.gz`` or plain), None where missing."""
        if split not in self.splits:
            raise KeyError(f"{self.name} has no split {split!r}; its splits are {sorted(self.splits)}")
        folder = self.folder(data_dir)
        stem = self.splits[split]
        return text_file(folder, stem, self.src_lang), text_file(folder, stem, self.tgt_lang)

    def locate(self, splits: Iterable[str], roots: Sequence[str | os.PathLike]) -> dict[str, tuple[Path, Path]]:
        """The (src, tgt) files of each of ``splits`` under the first of the data directories ``roots`` that holds
        both; a split found under none is left out (an unknown split raises KeyError naming the known ones)."""
        found: dict[str, tuple[Path, Path]] = {}
        for split in splits:
            for root in roots:
                src, tgt = self.files(split, root)
                if src is not None and tgt is not None:
                    found[split] = (src, tgt)
                    break
        return found

    def reference_sets(self, *roots: str | os.PathLike) -> list[ReferenceSet]:
        """The :class:`~mma_nmt.data.reference_sets.ReferenceSet` of each of ``test_sets``, read from
        ``<test_set>.<tgt_lang><i>`` in the corpus folder of the first of the data directories ``roots`` that has
        one; a missing file is an error that names it."""
        if not self.test_sets:
            raise ValueError(f"{self.name} has one test set and one reference: score its test split directly")
        folders = [self.folder(root) for root in roots]
        folder = next((candidate for candidate in folders if candidate.is_dir()), folders[0])
        sets = []
        for stem in self.test_sets:
            streams = []
            for index in range(self.references):
                path = text_file(folder, stem, f"{self.tgt_lang}{index}")
                if path is None:
                    raise FileNotFoundError(f"{self.name}: no reference {folder / f'{stem}.{self.tgt_lang}{index}'}"
                                            f"[.gz] ({self.references} references per test set)")
                streams.append(read_text_lines(path))
            sets.append(ReferenceSet(name=stem, references=streams))
        return sets

    def reversed(self, name: str) -> "CorpusSpec":
        """The same corpus in the other direction (the references of ``test_sets`` are in the target language only,
        so the reversed corpus has one reference)."""
        return CorpusSpec(name=name, src_lang=self.tgt_lang, tgt_lang=self.src_lang, splits=dict(self.splits),
                          local_folder=self.local_folder, remote_files=self.remote_files, builder=self.builder,
                          text_state=self.text_state, note=self.note, preprocessing=dict(self.preprocessing))


def default_data_dir() -> Path:
    """Where corpora are read from: ``$MMA_NMT_DATA_DIR`` if set, else ``<repo>/../shared/data``.

    When the package is installed outside its repository, ``<cwd>/../shared/data`` and ``<cwd>/shared/data`` are tried
    next; the first candidate is returned when none exists (errors then name it).
    """
    env = os.environ.get(DATA_DIR_ENV)
    if env:
        return Path(env).expanduser()
    repo = Path(__file__).resolve().parents[2]
    candidates = [repo.parent / "shared" / "data", Path.cwd().parent / "shared" / "data", Path.cwd() / "shared" / "data"]
    for candidate in candidates:
        if candidate.is_dir():
            return candidate
    return candidates[0]


_MULTI30K_COMMIT = "a3d2e0d26b56f3846f66a952536ffed4e401d05a"
_MULTI30K_SHA256 = {
    "train.en.gz": "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
    "train.de.gz": "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
    "val.en.gz": "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
    "val.de.gz": "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
    "test_2016_flickr.en.gz": "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
    "test_2016_flickr.de.gz": "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
    "test_2017_flickr.en.gz": "76a444ee25172e72695cddb13ae4a3bda59430617be88e0bb46b60504f054074",
    "test_2017_flickr.de.gz": "a2c89666db00c495cd8513b9d708d5a3acc205d7de312ef2bf5fb7ebc1540aee",
    "test_2017_mscoco.en.gz": "aab300bfb4427697987e02cd0aacd44bfe8aa50456231b6474c08038bbed2b58",
    "test_2017_mscoco.de.gz": "799e4854c25d601cb6cb6be29eabe5667734c61ace2f495e03e429031a0bc338",
    "test_2018_flickr.en.gz": "ef4f4844037d4c5dea75c9a8ed5fd78905967a26f67c255e230cc9780032654d",
    "test_2018_flickr.de.gz": "ddd0130c7d97482dc5197a02141dae8dd79f20f03586c480d675c09a32daf608",
}
MULTI30K = CorpusSpec(
    name="multi30k_de_en", src_lang="de", tgt_lang="en",
    splits={"train": "train", "valid": "val", "test": "test_2016_flickr", "test_2017_flickr": "test_2017_flickr",
            "test_2017_mscoco": "test_2017_mscoco", "test_2018_flickr": "test_2018_flickr"},
    local_folder="multi30k",
    remote_files=tuple(
        RemoteFile(f"https://raw.githubusercontent.com/multi30k/dataset/{_MULTI30K_COMMIT}/data/task1/raw/{name}",
                   name, sha)
        for name, sha in _MULTI30K_SHA256.items()),
    note="WMT16 Multi30k Task 1: train 29,000 / val 1,014 / test_2016_flickr 1,000 (+ 2017/2018 test sets).",
)

IWSLT14 = CorpusSpec(
    name="iwslt14_de_en", src_lang="de", tgt_lang="en",
    splits={"train": "train", "valid": "valid", "test": "test"}, local_folder="iwslt14_de_en",
    remote_files=(RemoteFile("http://dl.fbaipublicfiles.com/fairseq/data/iwslt14/de-en.tgz", "de-en.tgz"),),
    builder="iwslt14_fairseq", text_state="moses-tokenized, lowercased (fairseq prepare-iwslt14 protocol)",
    note="fairseq setup: valid = every 23rd cleaned training pair (7,283), test = dev2010+tedx.dev2012+tst2010-2012 "
         "(6,750). The archive is the WIT3 2014-01 de-en release as mirrored by fairseq "
         "(formerly https://wit3.fbk.eu/archive/2014-01/texts/de/en/de-en.tgz).",
    preprocessing={lang: {"moses_tokenize": True, "lowercase": True, "escape": True} for lang in ("de", "en")},
)

_STANFORD = "https://nlp.stanford.edu/projects/nmt/data/iwslt15.en-vi"
IWSLT15 = CorpusSpec(
    name="iwslt15_en_vi", src_lang="en", tgt_lang="vi",
    splits={"train": "train", "valid": "tst2012", "test": "tst2013"}, local_folder="iwslt15_en_vi",
    remote_files=tuple(RemoteFile(f"{_STANFORD}/{stem}.{lang}", f"{stem}.{lang}")
                       for stem in ("train", "tst2012", "tst2013") for lang in ("en", "vi")),
    text_state="tokenized, cased, HTML-escaped (Stanford NMT files)",
    note="Luong & Manning (2015): train 133,317 / dev tst2012 1,553 / test tst2013 1,268.",
    preprocessing={lang: {"moses_tokenize": True, "escape": True} for lang in ("en", "vi")},
)

_HF_IWSLT17 = ("https://huggingface.co/datasets/IWSLT/iwslt2017/resolve/main/data/2017-01-trnted/texts/de/en/"
               "de-en.zip")
IWSLT17 = CorpusSpec(
    name="iwslt17_de_en", src_lang="de", tgt_lang="en",
    splits={"train": "train", "valid": "valid", "test": "test"}, local_folder="iwslt17_de_en",
    remote_files=(RemoteFile(_HF_IWSLT17, "de-en.zip"),), builder="iwslt17_wit3",
    note="IWSLT 2017 TED (WIT3 2017-01-trnted, as hosted by Hugging Face): valid = dev2010 (888), "
         "test = tst2010-tst2015 (8,079).",
)

_EUROPARL_V7 = RemoteFile("http://statmt.org/wmt13/training-parallel-europarl-v7.tgz",
                          "training-parallel-europarl-v7.tgz")
_COMMONCRAWL = RemoteFile("http://statmt.org/wmt13/training-parallel-commoncrawl.tgz",
                          "training-parallel-commoncrawl.tgz")
WMT14 = CorpusSpec(
    name="wmt14_en_de", src_lang="en", tgt_lang="de",
    splits={"train": "train", "valid": "newstest2013", "test": "newstest2014"}, local_folder="wmt14_en_de",
    remote_files=(
        _EUROPARL_V7, _COMMONCRAWL,
        RemoteFile("http://statmt.org/wmt14/training-parallel-nc-v9.tgz", "training-parallel-nc-v9.tgz"),
        RemoteFile("http://statmt.org/wmt14/dev.tgz", "dev.tgz"),
        RemoteFile("http://statmt.org/wmt14/test-full.tgz", "test-full.tgz"),
    ),
    builder="wmt_statmt",
    note="WMT14 En-De: train = Europarl v7 + Common Crawl + News Commentary v9 (about 4.5M pairs), "
         "valid = newstest2013, test = newstest2014 (full, 3,003).",
)

WMT16_EN_DE = CorpusSpec(
    name="wmt16_en_de", src_lang="en", tgt_lang="de",
    splits={"train": "train", "valid": "newstest2013", "test": "newstest2015"}, local_folder="wmt16_en_de",
    remote_files=(
        _EUROPARL_V7, _COMMONCRAWL,
        RemoteFile("http://data.statmt.org/wmt16/translation-task/training-parallel-nc-v11.tgz",
                   "training-parallel-nc-v11.tgz"),
        RemoteFile("http://data.statmt.org/wmt16/translation-task/dev.tgz", "dev.tgz"),
    ),
    builder="wmt_statmt",
    note="WMT16 En-De as the TensorFlow wmt16_en_de.sh recipe: train = Europarl v7 + Common Crawl + News Commentary "
         "v11 (about 4.5M pairs), valid = newstest2013, test = newstest2015 (2,169; from the WMT16 dev archive).",
)

WMT17_DE_EN = CorpusSpec(
    name="wmt17_de_en", src_lang="de", tgt_lang="en",
    splits={"train": "train", "valid": "newstest2013", "test": "newstest2017", "newstest2014": "newstest2014"},
    local_folder="wmt17_de_en",
    remote_files=(
        _EUROPARL_V7, _COMMONCRAWL,
        RemoteFile("http://data.statmt.org/wmt17/translation-task/training-parallel-nc-v12.tgz",
                   "training-parallel-nc-v12.tgz"),
        RemoteFile("http://data.statmt.org/wmt17/translation-task/rapid2016.tgz", "rapid2016.tgz"),
        RemoteFile("http://data.statmt.org/wmt17/translation-task/dev.tgz", "dev.tgz"),
        RemoteFile("http://data.statmt.org/wmt17/translation-task/test.tgz", "test.tgz"),
        RemoteFile("http://statmt.org/wmt14/test-full.tgz", "test-full.tgz"),
    ),
    builder="wmt_statmt",
    note="WMT17 De-En: train = Europarl v7 + Common Crawl + News Commentary v12 + Rapid 2016 (about 5.9M pairs), "
         "valid = newstest2013, test = newstest2017 (3,004), extra test split newstest2014 (full, 3,003).",
)

IWSLT14_ES_EN = CorpusSpec(
    name="iwslt14_es_en", src_lang="es", tgt_lang="en",
    splits={"train": "train", "valid": "valid", "test": "test"}, local_folder="iwslt14_es_en", builder="manual",
    text_state="raw (WIT3 TED transcripts, original casing)",
    note="IWSLT 2014 Es-En (WIT3 release 2014-01, formerly https://wit3.fbk.eu/archive/2014-01/texts/es/en/es-en.tgz, "
         "no longer served): train about 183K pairs, valid = dev2010 + tst2010 + tst2011 + tst2012 (about 5,593), "
         "test = tst2014. Not downloadable: place train/valid/test.{es,en} (one sentence per line) in the local "
         "folder.",
)

_ENJA_COMMIT = "312408a11c5fbcbc09443bebb18121f7efdcd61e"
_ENJA_SHA256 = {  # of the uncompressed upstream files
    "train.en": "148b05dcd28638fe20ee84f2b1127001c80982be352007dda241fb759adadc76",
    "train.ja": "fc81a1434349ec98a449d7ae9cd2530057f689637684ecfed3501ea6a8a07ecc",
    "dev.en": "04a2673449770657fd5e3b963cb856be3130923212b6db8ac7eaeef18f06c041",
    "dev.ja": "cd534f56b8639dc130f86a365e5ec0aa70042000bdd740a622fbbf8b6be4acca",
    "test.en": "45edb380749ec2b49cca7618fc5a7595fc9f791180672ba466b90c873a4aa8bf",
    "test.ja": "d37dc460a81b064e4106c8913eb11fa300da05cf3f58a7a5bbfec7e20947ddef",
}
SMALL_ENJA = CorpusSpec(
    name="small_enja_en_ja", src_lang="en", tgt_lang="ja",
    splits={"train": "train", "valid": "dev", "test": "test"}, local_folder="small_parallel_enja",
    remote_files=tuple(
        RemoteFile(f"https://raw.githubusercontent.com/odashi/small_parallel_enja/{_ENJA_COMMIT}/{name}", name, sha)
        for name, sha in _ENJA_SHA256.items()),
    text_state="tokenized; English lowercased; Japanese KyTea-segmented",
    note="Tanaka-corpus subset: train 50,000 / dev 500 / test 500.",
    preprocessing={"en": {"unsupported": "the Stanford Tokenizer and lowercasing"},
                   "ja": {"unsupported": "KyTea word segmentation"}},
)

ASPEC = CorpusSpec(
    name="aspec_en_ja", src_lang="en", tgt_lang="ja",
    splits={"train": "train", "valid": "dev", "test": "test"}, local_folder="aspec_je",
    builder="manual",
    text_state="raw (as distributed by JST)",
    note="WAT17 ASPEC-JE: the first 2,000,000 training pairs / dev 1,790 / test 1,812. Licensed by JST "
         "(https://jipsti.jst.go.jp/aspec/); not downloadable: place train/dev/test.{en,ja} in the local folder.",
)

NIST_ZH_EN = CorpusSpec(
    name="nist_zh_en", src_lang="zh", tgt_lang="en",
    splits={"train": "train", "valid": "mt02", "test": "mt03_08"}, local_folder="nist_zh_en", builder="manual",
    text_state="Chinese segmented (Stanford Segmenter), English Moses-tokenized and lowercased",
    note="NIST Zh-En: 1.25M LDC pairs (LDC2002E18, LDC2003E07, LDC2003E14, LDC2004T07 Hansards, LDC2004T08, "
         "LDC2005T06; licensed by the LDC), valid MT02, test MT03, MT04, MT05, MT06, MT08 with 4 references each. "
         "Not downloadable: place in the local folder train.{zh,en}, mt02.{zh,en} (first reference), per test set "
         "mt0N.zh and mt0N.en0 .. mt0N.en3, and mt03_08.{zh,en}: the five sets concatenated in that order, with "
         "their first references.",
    test_sets=("mt03", "mt04", "mt05", "mt06", "mt08"), references=4,
    preprocessing={"zh": {"unsupported": "Stanford Segmenter word segmentation"},
                   "en": {"moses_tokenize": True, "lowercase": True}},
)

WMT17_ZH_EN = CorpusSpec(
    name="wmt17_zh_en", src_lang="zh", tgt_lang="en",
    splits={"train": "train", "valid": "newsdev2017", "test": "newstest2017"}, local_folder="wmt17_zh_en",
    builder="manual",
    note="WMT17 Zh-En (https://www.statmt.org/wmt17/translation-task.html): about 20M pairs (News Commentary v12, "
         "UN v1.0, CWMT; CWMT needs registration), valid newsdev2017, test newstest2017, processed as Hassan et "
         "al. (2018). Not built automatically: place train/newsdev2017/newstest2017.{zh,en} in the local folder.",
)

CORPORA: dict[str, CorpusSpec] = {
    "multi30k_de_en": MULTI30K,
    "multi30k_en_de": MULTI30K.reversed("multi30k_en_de"),
    "iwslt14_de_en": IWSLT14,
    "iwslt14_en_de": IWSLT14.reversed("iwslt14_en_de"),
    "iwslt14_es_en": IWSLT14_ES_EN,
    "iwslt15_en_vi": IWSLT15,
    "iwslt17_de_en": IWSLT17,
    "wmt14_en_de": WMT14,
    "wmt16_en_de": WMT16_EN_DE,
    "wmt17_de_en": WMT17_DE_EN,
    "wmt17_en_de": WMT17_DE_EN.reversed("wmt17_en_de"),
    "small_enja_en_ja": SMALL_ENJA,
    "small_enja_ja_en": SMALL_ENJA.reversed("small_enja_ja_en"),
    "aspec_en_ja": ASPEC,
    "aspec_ja_en": ASPEC.reversed("aspec_ja_en"),
    "nist_zh_en": NIST_ZH_EN,
    "wmt17_zh_en": WMT17_ZH_EN,
}


def get_corpus(name: str) -> CorpusSpec:
    """The spec named ``name``, with the list of known names in the error when there is none."""
    try:
        return CORPORA[name]
    except KeyError:
        raise KeyError(f"unknown corpus {name!r}; known corpora: {', '.join(sorted(CORPORA))}") from None
