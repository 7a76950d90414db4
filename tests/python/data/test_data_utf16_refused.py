"""UTF-16 (and UTF-32) corpora are refused, naming the file and the likely encoding (issue 50, case 5): UTF-16 of ASCII
text is valid UTF-8, one NUL byte beside each character, so it passed ``prepare`` and trained on garbage. A NUL byte in
a UTF-8 line is a problem of its own (``nul_byte``)."""

from __future__ import annotations

import gzip

import pytest

from mma_nmt.data import PrepareConfig, prepare
from mma_nmt.data.fileio import read_text_lines
from mma_nmt.data.reader import DataFormatError, read_parallel

GERMAN = "Ein Hund rennt.\nZwei Katzen schlafen.\nEin Mann liest.\n"
ENGLISH = "A dog runs.\nTwo cats sleep.\nA man reads.\n"


@pytest.mark.parametrize("codec, named", [("utf-16", "UTF-16 LE"), ("utf-16-le", "UTF-16 LE"),
                                          ("utf-16-be", "UTF-16 BE"), ("utf-32", "UTF-32 LE")])
@pytest.mark.parametrize("on_error", ["skip", "fail"])
def test_a_wide_encoding_is_refused_naming_the_file_and_the_encoding(tmp_path, codec, named, on_error):
    src, tgt = tmp_path / "train.de", tmp_path / "train.en"
    src.write_bytes(GERMAN.encode(codec))
    tgt.write_text(ENGLISH, encoding="utf-8")
    with pytest.raises(DataFormatError, match=rf"^{src}:1: not_utf8: {src} looks like {named}"):
        read_parallel(src, tgt, on_error=on_error)
    with pytest.raises(ValueError, match=rf"^{src} looks like {named}.*iconv"):
        read_text_lines(src)  # sources to translate, hypotheses, references


def test_prepare_refuses_a_utf16_corpus(tmp_path):
    folder = tmp_path / "corpora" / "multi30k"
    folder.mkdir(parents=True)
    for stem in ("train", "val"):
        with gzip.open(folder / f"{stem}.de.gz", "wb") as handle:  # compressed, too
            handle.write(GERMAN.encode("utf-16-le"))
        (folder / f"{stem}.en").write_text(ENGLISH, encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"train.de.gz looks like UTF-16 LE"):
        prepare(PrepareConfig(corpus="multi30k_de_en", data_dir=str(tmp_path / "corpora"), out_dir=str(tmp_path / "out"),
                              vocab_size=40, splits=("train", "valid"), progress=False))


def test_a_nul_byte_in_a_utf8_line_is_a_problem(tmp_path):
    src, tgt = tmp_path / "a.de", tmp_path / "a.en"
    src.write_bytes(b"Ein Hund.\nZwei\x00Katzen.\nEin Mann.\n")
    tgt.write_text(ENGLISH, encoding="utf-8")
    text = read_parallel(src, tgt, on_error="skip")
    assert text.src == ["Ein Hund.", "Ein Mann."] and text.report.counts["nul_byte"] == 1
    with pytest.raises(DataFormatError, match=rf"^{src}:2: nul_byte: NUL byte at character 4"):
        read_parallel(src, tgt, on_error="fail")
