"""Corpus builders on small archives laid out like the original releases (WIT3 IWSLT14, statmt WMT14 and WMT17)."""

from __future__ import annotations

import gzip
import io
import tarfile
from pathlib import Path

import pytest

from mma_nmt.data.corpora import CORPORA
from mma_nmt.data.download import RemoteFile
from mma_nmt.data.reader import read_parallel
from mma_nmt.data.sources import extract_segments, fetch_corpus


def make_tgz(path: Path, members: dict[str, str | bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, text in members.items():
            data = text if isinstance(text, bytes) else text.encode("utf-8")
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def read_gz_lines(path: Path) -> list[str]:
    return gzip.decompress(path.read_bytes()).decode("utf-8").split("\n")[:-1]


def xml(segments: list[str]) -> str:
    return "<doc>\n" + "".join(f'<seg id="{i}"> {s} </seg>\n' for i, s in enumerate(segments, 1)) + "</doc>\n"


@pytest.fixture
def offline(monkeypatch):
    """Makes ``download`` copy from a local folder keyed by file name, so builders run without any network."""
    store: dict[str, Path] = {}

    def fake_download(remote: RemoteFile, dest_dir, **kwargs):
        dest = Path(dest_dir) / remote.filename
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(store[remote.filename].read_bytes())
        return dest

    monkeypatch.setattr("mma_nmt.data.sources.download", fake_download)
    return store


def test_extract_segments_unescapes_and_trims():
    text = '<doc>\n<seg id="1">  A &amp; B  </seg>\n<seg id="2">x&lt;y</seg><seg id="3">\nmulti\n</seg></doc>'
    assert extract_segments(text) == ["A & B", "x<y", "multi"]


def test_iwslt14_follows_the_fairseq_protocol(offline, tmp_path):
    de = [f"Satz Nummer {i}, gut!" for i in range(46)]
    en = [f"Sentence number {i}, good!" for i in range(46)]
    de_tags = ["<url>http://x</url>", "<keywords>k</keywords>", "<talkid>7</talkid>", "<title>Ein Titel</title>",
               "kurz", *de]
    en_tags = ["<url>http://x</url>", "<keywords>k</keywords>", "<talkid>7</talkid>", "<title>A Title</title>",
               "this one is far too long for the other side", *en]
    members = {"de-en/train.tags.de-en.de": "\n".join(de_tags) + "\n",
               "de-en/train.tags.de-en.en": "\n".join(en_tags) + "\n"}
    for name in ("TED.dev2010", "TEDX.dev2012", "TED.tst2010", "TED.tst2011", "TED.tst2012"):
        members[f"de-en/IWSLT14.{name}.de-en.de.xml"] = xml([f"Es ist {name} &amp; gut."])
        members[f"de-en/IWSLT14.{name}.de-en.en.xml"] = xml([f"It\u2019s {name} &amp; \"good\"."])
    offline["de-en.tgz"] = make_tgz(tmp_path / "de-en.tgz", members)
    folder = fetch_corpus(CORPORA["iwslt14_de_en"], tmp_path / "data", progress=False)
    train_de, valid_de = read_gz_lines(folder / "train.de.gz"), read_gz_lines(folder / "valid.de.gz")
    # cleaned pairs: the title pair + 46 sentences (the 1-vs-10-token pair fails the 1.5 ratio); every 23rd is valid
    assert valid_de == ["satz nummer 21 , gut !", "satz nummer 44 , gut !"]
    assert train_de[0] == "ein titel" and len(train_de) == 45
    assert read_gz_lines(folder / "valid.en.gz")[0] == "sentence number 21 , good !"
    test_en = read_gz_lines(folder / "test.en.gz")
    assert test_en[0] == "it &apos;s ted.dev2010 &amp; &quot; good &quot; ." and len(test_en) == 5


def test_wmt14_concatenates_training_corpora_and_reads_sgm(offline, tmp_path):
    offline["training-parallel-europarl-v7.tgz"] = make_tgz(tmp_path / "e.tgz", {
        "training/europarl-v7.de-en.de": "Europa eins\nEuropa zwei\n",
        "training/europarl-v7.de-en.en": "Europe one\nEurope two\n"})
    offline["training-parallel-commoncrawl.tgz"] = make_tgz(tmp_path / "c.tgz", {
        "commoncrawl.de-en.de": b"Netz\n\xff kaputt\n", "commoncrawl.de-en.en": b"Web\nbroken\n"})
    offline["training-parallel-nc-v9.tgz"] = make_tgz(tmp_path / "n.tgz", {
        "training/news-commentary-v9.de-en.de": "Nachricht\n", "training/news-commentary-v9.de-en.en": "News\n"})
    offline["dev.tgz"] = make_tgz(tmp_path / "d.tgz", {"dev/newstest2013.de": "Test 13\n", "dev/newstest2013.en": "Test 13 en\n"})
    offline["test-full.tgz"] = make_tgz(tmp_path / "t.tgz", {
        "test-full/newstest2014-deen-src.en.sgm": xml(["Gutach: safety", "A &amp; B"]),
        "test-full/newstest2014-deen-ref.de.sgm": xml(["Gutach: Sicherheit", "A &amp; B"]),
        "test-full/newstest2014-deen-src.de.sgm": xml(["wrong side"]),
        "test-full/newstest2014-deen-ref.en.sgm": xml(["wrong side"])})
    existing = tmp_path / "data" / "wmt14_en_de" / "newstest2013.de"
    existing.parent.mkdir(parents=True)
    existing.write_text("an existing copy is kept\n", encoding="utf-8")
    folder = fetch_corpus(CORPORA["wmt14_en_de"], tmp_path / "data", progress=False)
    assert existing.read_text(encoding="utf-8") == "an existing copy is kept\n"
    assert not (folder / "newstest2013.de.gz").exists()
    assert read_gz_lines(folder / "train.en.gz") == ["Europe one", "Europe two", "Web", "broken", "News"]
    text = read_parallel(folder / "train.en.gz", folder / "train.de.gz")  # the bad bytes reach the reader's report
    assert text.tgt == ["Europa eins", "Europa zwei", "Netz", "Nachricht"]
    assert text.report.messages[0].startswith(f"{folder / 'train.de.gz'}:4: invalid_utf8")
    assert read_gz_lines(folder / "newstest2013.en.gz") == ["Test 13 en"]
    assert read_gz_lines(folder / "newstest2014.en.gz") == ["Gutach: safety", "A & B"]
    assert read_gz_lines(folder / "newstest2014.de.gz") == ["Gutach: Sicherheit", "A & B"]


def test_wmt17_reversed_direction_reads_its_own_sgm_files(offline, tmp_path):
    parts = {"training-parallel-europarl-v7.tgz": "training/europarl-v7.de-en",
             "training-parallel-commoncrawl.tgz": "commoncrawl.de-en",
             "training-parallel-nc-v12.tgz": "training/news-commentary-v12.de-en",
             "rapid2016.tgz": "rapid2016.de-en"}
    for i, (archive, stem) in enumerate(parts.items()):
        offline[archive] = make_tgz(tmp_path / f"{i}.tgz", {f"{stem}.de": f"Teil {i}\n", f"{stem}.en": f"part {i}\n"})
    offline["dev.tgz"] = make_tgz(tmp_path / "d.tgz", {"dev/newstest2013.de": "Test 13\n",
                                                       "dev/newstest2013.en": "Test 13 en\n"})
    offline["test.tgz"] = make_tgz(tmp_path / "t.tgz", {
        "test/newstest2017-ende-src.en.sgm": xml(["en source"]), "test/newstest2017-ende-ref.de.sgm": xml(["de ref"]),
        "test/newstest2017-deen-src.de.sgm": xml(["wrong direction"]),
        "test/newstest2017-deen-ref.en.sgm": xml(["wrong direction"])})
    offline["test-full.tgz"] = make_tgz(tmp_path / "f.tgz", {
        "test-full/newstest2014-deen-src.en.sgm": xml(["2014 en"]),
        "test-full/newstest2014-deen-ref.de.sgm": xml(["2014 de"])})
    spec = CORPORA["wmt17_en_de"]
    assert (spec.src_lang, spec.tgt_lang, spec.local_folder) == ("en", "de", "wmt17_de_en")
    folder = fetch_corpus(spec, tmp_path / "data", progress=False)
    assert read_gz_lines(folder / "train.en.gz") == ["part 0", "part 1", "part 2", "part 3"]
    assert read_gz_lines(folder / "train.de.gz") == ["Teil 0", "Teil 1", "Teil 2", "Teil 3"]
    assert read_gz_lines(folder / "newstest2017.en.gz") == ["en source"]
    assert read_gz_lines(folder / "newstest2017.de.gz") == ["de ref"]
    assert read_gz_lines(folder / "newstest2014.de.gz") == ["2014 de"]
    assert read_gz_lines(folder / "newstest2013.en.gz") == ["Test 13 en"]


def test_manual_corpus_names_what_is_missing(tmp_path):
    with pytest.raises(FileNotFoundError, match="iwslt14_es_en cannot be downloaded automatically"):
        fetch_corpus(CORPORA["iwslt14_es_en"], tmp_path, progress=False)
