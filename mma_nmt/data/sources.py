"""Building a corpus's local layout (``<folder>/<stem>.<lang>[.gz]``) from its original public downloads.

Downloads go to ``<folder>/downloads/`` (resumable, see :mod:`mma_nmt.data.download`); each output file is written
atomically, and an existing split file is never overwritten (so the shared dev/test copies stay as they are).
"""

from __future__ import annotations

import html
import logging
import os
import re
import tarfile
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from mma_nmt.data.corpora import CorpusSpec, text_file
from mma_nmt.data.download import download
from mma_nmt.data.fileio import atomic_gzip_lines

log = logging.getLogger(__name__)
_SEG = re.compile(r"<seg[^>]*>(.*?)</seg>", re.S)


def fetch_corpus(spec: CorpusSpec, data_dir: str | os.PathLike, *, mirror: str | None = None,
                 progress: bool = True) -> Path:
    """Downloads ``spec``'s original files and builds its layout in ``data_dir/spec.local_folder`` (skipped when every
    split is already there). Returns that folder."""
    folder = spec.folder(data_dir)
    if not missing_splits(spec, data_dir, spec.splits):
        return folder
    if spec.builder == "manual":
        raise FileNotFoundError(f"{spec.name} cannot be downloaded automatically ({spec.note}); missing under "
                                f"{folder}: {', '.join(missing_splits(spec, data_dir, spec.splits))}")
    folder.mkdir(parents=True, exist_ok=True)
    log.info("building %s in %s from %d remote files", spec.name, folder, len(spec.remote_files))
    _BUILDERS[spec.builder](spec, folder, mirror=mirror, progress=progress)
    return folder


def _fetch_all(spec: CorpusSpec, dest: Path, *, mirror: str | None, progress: bool) -> dict[str, Path]:
    return {remote.filename: download(remote, dest, mirror=mirror, progress=progress) for remote in spec.remote_files}


def _build_direct(spec: CorpusSpec, folder: Path, *, mirror: str | None, progress: bool) -> None:
    """The remote files already are ``<stem>.<lang>[.gz]``: download the missing ones straight into the folder."""
    for remote in spec.remote_files:
        name = remote.filename
        plain = name[:-3] if name.endswith(".gz") else name
        if not (folder / plain).is_file() and not (folder / f"{plain}.gz").is_file():
            download(remote, folder, mirror=mirror, progress=progress)


def extract_segments(xml_text: str) -> list[str]:
    """The text of every ``<seg ...>...</seg>`` element in document order, trimmed and XML-unescaped (WIT3/SGML)."""
    return [html.unescape(match.group(1)).strip() for match in _SEG.finditer(xml_text)]


def _archive_members(path: Path) -> dict[str, bytes]:
    """Basename -> content for every regular file of a .tgz/.tar or .zip archive (read into memory)."""
    members: dict[str, bytes] = {}
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                if not info.is_dir():
                    members[Path(info.filename).name] = archive.read(info)
        return members
    with tarfile.open(path) as archive:
        for info in archive:
            if info.isfile():
                handle = archive.extractfile(info)
                members[Path(info.name).name] = handle.read() if handle else b""
    return members


def _member_text(members: dict[str, bytes], name: str, archive: Path) -> str:
    if name not in members:
        raise FileNotFoundError(f"{archive}: no member named {name} (found: {', '.join(sorted(members)[:20])} ...)")
    try:
        return members[name].decode("utf-8")
    except UnicodeDecodeError as error:
        line = members[name][:error.start].count(b"\n") + 1
        raise ValueError(f"{archive}:{name}:{line}: invalid UTF-8 ({error.reason})") from error


def _write_split(folder: Path, stem: str, lang: str, lines: Iterable[str | bytes]) -> None:
    """Writes ``<stem>.<lang>.gz`` unless the split file already exists (plain or gzip): existing copies, such as
    the shared dev/test sets, are never overwritten."""
    existing = text_file(folder, stem, lang)
    if existing is not None:
        log.info("%s exists; not overwritten", existing)
        return
    with atomic_gzip_lines(folder / f"{stem}.{lang}.gz") as write:
        for line in lines:
            write(line)


def _moses(lang: str):
    from sacremoses import MosesTokenizer
    tokenizer = MosesTokenizer(lang=lang)
    return lambda text: tokenizer.tokenize(text, escape=True, return_str=True)


def _iwslt14_train_lines(text: str) -> Iterator[str]:
    """fairseq's filter of WIT3 ``train.tags`` files: drop url/talkid/keywords lines, strip title/description tags."""
    for line in text.split("\n"):
        if "<url>" in line or "<talkid>" in line or "<keywords>" in line:
            continue
        for tag in ("<title>", "</title>", "<description>", "</description>"):
            line = line.replace(tag, "")
        yield line.strip()


def _clean_pairs(src: list[str], tgt: list[str], *, min_len: int = 1, max_len: int = 175,
                 ratio: float = 1.5) -> tuple[list[str], list[str]]:
    """The Moses ``clean-corpus-n`` rule: keep pairs of 1..175 tokens per side whose token-count ratio is <= 1.5."""
    kept_src, kept_tgt = [], []
    for a, b in zip(src, tgt):
        n, m = len(a.split()), len(b.split())
        if min_len <= n <= max_len and min_len <= m <= max_len and n <= ratio * m and m <= ratio * n:
            kept_src.append(a)
            kept_tgt.append(b)
    return kept_src, kept_tgt


def _build_iwslt14(spec: CorpusSpec, folder: Path, *, mirror: str | None, progress: bool) -> None:
    """fairseq ``prepare-iwslt14.sh`` (before BPE), with sacremoses in place of the Moses perl scripts."""
    archive = _fetch_all(spec, folder / "downloads", mirror=mirror, progress=progress)["de-en.tgz"]
    members = _archive_members(archive)
    langs = ("de", "en")
    tok = {lang: _moses(lang) for lang in langs}
    train = {lang: [tok[lang](line) for line in _iwslt14_train_lines(_member_text(members, f"train.tags.de-en.{lang}",
                                                                                   archive))] for lang in langs}
    src, tgt = _clean_pairs(train["de"], train["en"])
    src, tgt = [s.lower() for s in src], [t.lower() for t in tgt]
    for lang, lines in (("de", src), ("en", tgt)):
        _write_split(folder, "valid", lang, (line for i, line in enumerate(lines, 1) if i % 23 == 0))
        _write_split(folder, "train", lang, (line for i, line in enumerate(lines, 1) if i % 23 != 0))
    test_sets = ("IWSLT14.TED.dev2010", "IWSLT14.TEDX.dev2012", "IWSLT14.TED.tst2010", "IWSLT14.TED.tst2011",
                 "IWSLT14.TED.tst2012")
    for lang in langs:
        segs = [seg.replace("\u2019", "'") for name in test_sets
                for seg in extract_segments(_member_text(members, f"{name}.de-en.{lang}.xml", archive))]
        _write_split(folder, "test", lang, (tok[lang](seg).lower() for seg in segs))


def _build_iwslt17(spec: CorpusSpec, folder: Path, *, mirror: str | None, progress: bool) -> None:
    """Raw text from the WIT3 2017 de-en archive: metadata lines (``<...>``) dropped from train, XML segments for
    valid (dev2010) and test (tst2010-tst2015, concatenated)."""
    archive = _fetch_all(spec, folder / "downloads", mirror=mirror, progress=progress)["de-en.zip"]
    members = _archive_members(archive)
    for lang in ("de", "en"):
        text = _member_text(members, f"train.tags.de-en.{lang}", archive)
        _write_split(folder, "train", lang, (line.strip() for line in text.split("\n")
                                             if line.strip() and not line.strip().startswith("<")))
        dev = extract_segments(_member_text(members, f"IWSLT17.TED.dev2010.de-en.{lang}.xml", archive))
        _write_split(folder, "valid", lang, dev)
        test = [seg for year in range(2010, 2016)
                for seg in extract_segments(_member_text(members, f"IWSLT17.TED.tst{year}.de-en.{lang}.xml", archive))]
        _write_split(folder, "test", lang, test)


def _iter_tar_member(archive: Path, basename: str) -> Iterator[bytes]:
    """Streams the lines (bytes, without ``\\n``) of one member of a large tar archive without extracting it.

    Bytes are passed through undecoded, so that malformed lines reach :func:`read_parallel`, which reports them.
    """
    with tarfile.open(archive) as tar:
        for info in tar:
            if info.isfile() and Path(info.name).name == basename:
                handle = tar.extractfile(info)
                assert handle is not None
                for raw in handle:
                    yield raw[:-1] if raw.endswith(b"\n") else raw
                return
    raise FileNotFoundError(f"{archive}: no member named {basename}")


@dataclass(frozen=True)
class WmtLayout:
    """Where a statmt.org WMT corpus's splits are inside its downloads.

    ``train``: (archive, member stem) parts concatenated in order, member ``<stem>.<lang>``. ``plain``: split stem ->
    (archive, member stem) of a plain-text dev/test set. ``sgm``: split stem -> (archive, member name template) of an
    SGML test set, with ``{pair}`` (source + target language, e.g. ``ende``), ``{role}`` (``src`` for the source
    language, ``ref`` for the target) and ``{lang}``.
    """

    train: tuple[tuple[str, str], ...]
    plain: dict[str, tuple[str, str]]
    sgm: dict[str, tuple[str, str]]


_WMT_TRAIN = (("training-parallel-europarl-v7.tgz", "europarl-v7.de-en"),
              ("training-parallel-commoncrawl.tgz", "commoncrawl.de-en"))
# keyed by the corpus's local folder, so a corpus and its reversed direction share one layout
WMT_LAYOUTS: dict[str, WmtLayout] = {
    "wmt14_en_de": WmtLayout(
        train=_WMT_TRAIN + (("training-parallel-nc-v9.tgz", "news-commentary-v9.de-en"),),
        plain={"newstest2013": ("dev.tgz", "newstest2013")},
        sgm={"newstest2014": ("test-full.tgz", "newstest2014-deen-{role}.{lang}.sgm")}),
    "wmt16_en_de": WmtLayout(
        train=_WMT_TRAIN + (("training-parallel-nc-v11.tgz", "news-commentary-v11.de-en"),),
        plain={"newstest2013": ("dev.tgz", "newstest2013")},
        sgm={"newstest2015": ("dev.tgz", "newstest2015-{pair}-{role}.{lang}.sgm")}),
    "wmt17_de_en": WmtLayout(
        train=_WMT_TRAIN + (("training-parallel-nc-v12.tgz", "news-commentary-v12.de-en"),
                            ("rapid2016.tgz", "rapid2016.de-en")),
        plain={"newstest2013": ("dev.tgz", "newstest2013")},
        sgm={"newstest2017": ("test.tgz", "newstest2017-{pair}-{role}.{lang}.sgm"),
             "newstest2014": ("test-full.tgz", "newstest2014-deen-{role}.{lang}.sgm")}),
}


def _build_wmt(spec: CorpusSpec, folder: Path, *, mirror: str | None, progress: bool) -> None:
    """A statmt.org WMT corpus (:data:`WMT_LAYOUTS`): training parts concatenated, plain dev sets copied, SGML test
    sets reduced to their segments."""
    if spec.local_folder not in WMT_LAYOUTS:
        raise ValueError(f"{spec.name}: no WMT layout for folder {spec.local_folder!r}; known: {sorted(WMT_LAYOUTS)}")
    layout = WMT_LAYOUTS[spec.local_folder]
    files = _fetch_all(spec, folder / "downloads", mirror=mirror, progress=progress)
    pair = spec.src_lang + spec.tgt_lang
    for lang in (spec.src_lang, spec.tgt_lang):
        _write_split(folder, "train", lang, (line for archive, stem in layout.train
                                             for line in _iter_tar_member(files[archive], f"{stem}.{lang}")))
        for split, (archive, stem) in layout.plain.items():
            _write_split(folder, split, lang, _iter_tar_member(files[archive], f"{stem}.{lang}"))
        role = "src" if lang == spec.src_lang else "ref"
        for split, (archive, template) in layout.sgm.items():
            name = template.format(pair=pair, role=role, lang=lang)
            sgm = b"\n".join(_iter_tar_member(files[archive], name)).decode("utf-8")
            _write_split(folder, split, lang, extract_segments(sgm))


_BUILDERS = {
    "direct": _build_direct,
    "iwslt14_fairseq": _build_iwslt14,
    "iwslt17_wit3": _build_iwslt17,
    "wmt_statmt": _build_wmt,
}


def missing_splits(spec: CorpusSpec, data_dir: str | os.PathLike, splits: Iterable[str]) -> list[str]:
    """The splits among ``splits`` that lack a source or target file under ``data_dir``."""
    splits = list(splits)
    found = spec.locate(splits, [data_dir])
    return [split for split in splits if split not in found]


__all__ = ["fetch_corpus", "extract_segments", "missing_splits"]
