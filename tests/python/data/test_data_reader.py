"""read_parallel: malformed lines are reported with file:line under the documented skip/fail policy."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from mma_nmt.data.corpora import CORPORA, default_data_dir, get_corpus
from mma_nmt.data.reader import DataFormatError, read_parallel

DATA = default_data_dir()
needs_data = pytest.mark.skipif(not (DATA / "multi30k").is_dir(), reason=f"shared corpora not found at {DATA}")


def write(path: Path, data: bytes, *, gz: bool = False) -> Path:
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


@pytest.fixture
def bad_pair(tmp_path):
    """Line 2: invalid UTF-8 (src); 3: empty (tgt); 4: too long (src); 5: CRLF (both); 6: fine; src has 2 extra lines."""
    src = b"ein Haus\n\xff\xfeHaus\nzwei\n" + b"x" * 50 + b"\nvier\r\nfunf\nsechs\nsieben\n"
    tgt = b"a house\nhouse\n   \nlong\nfour\r\nfive\n"
    return write(tmp_path / "bad.de", src), write(tmp_path / "bad.en.gz", tgt, gz=True)


def test_skip_policy_drops_bad_pairs_and_reports_file_and_line(bad_pair):
    src_path, tgt_path = bad_pair
    text = read_parallel(src_path, tgt_path, on_error="skip", max_line_chars=40)
    assert text.src == ["ein Haus", "vier", "funf"]
    assert text.tgt == ["a house", "four", "five"]
    report = text.report
    assert report.counts == {"invalid_utf8": 1, "empty_line": 1, "line_too_long": 1, "windows_line_ending": 2,
                             "line_count_mismatch": 2}
    assert (report.pairs_read, report.pairs_kept, report.pairs_skipped) == (6, 3, 3)
    messages = "\n".join(report.messages)
    assert f"{src_path}:2: invalid_utf8:" in messages
    assert f"{tgt_path}:3: empty_line:" in messages
    assert f"{src_path}:4: line_too_long: 50 characters > max_line_chars=40" in messages
    assert f"{src_path}:5: windows_line_ending:" in messages and f"{tgt_path}:5: windows_line_ending:" in messages
    assert f"{src_path}:7: line_count_mismatch: {src_path} has 8 lines but {tgt_path} has 6" in messages
    assert "kept 3/6 pairs" in report.summary()


@pytest.mark.parametrize(
    "src, tgt, where, kind",
    [
        (b"a\n\xc3\x28\n", b"a\nb\n", ("src", 2), "invalid_utf8"),
        (b"a\nb\n", b"a\n\n", ("tgt", 2), "empty_line"),
        (b"a\r\nb\n", b"a\nb\n", ("src", 1), "windows_line_ending"),
        (b"a\nb\nc\n", b"a\nb\n", ("src", 3), "line_count_mismatch"),
        (b"a\n", b"a\nb\nc\n", ("tgt", 2), "line_count_mismatch"),
        (b"a\n" + b"y" * 41 + b"\n", b"a\nb\n", ("src", 2), "line_too_long"),
    ],
)
def test_fail_policy_raises_with_file_and_line(tmp_path, src, tgt, where, kind):
    paths = {"src": write(tmp_path / "x.src", src), "tgt": write(tmp_path / "x.tgt", tgt)}
    with pytest.raises(DataFormatError) as info:
        read_parallel(paths["src"], paths["tgt"], on_error="fail", max_line_chars=40)
    error = info.value
    assert (error.path, error.line, error.kind) == (str(paths[where[0]]), where[1], kind)
    assert str(error).startswith(f"{paths[where[0]]}:{where[1]}: {kind}: ")


def test_byte_order_mark_is_removed_under_both_policies(tmp_path):
    src = write(tmp_path / "bom.en", "\ufeffhello\nworld".encode())  # no final newline either
    tgt = write(tmp_path / "bom.vi", "xin chào\nthế giới\n".encode())
    for policy in ("skip", "fail"):
        text = read_parallel(src, tgt, on_error=policy)
        assert text.src == ["hello", "world"] and text.report.counts == {"bom": 1}


def test_only_newline_ends_a_line(tmp_path):
    """U+2028, form feed and a lone CR inside a line must not split it (str.splitlines would)."""
    src = write(tmp_path / "s", "a\u2028b\x0cc\rd\ne\n".encode())
    tgt = write(tmp_path / "t", b"1\n2\n")
    assert read_parallel(src, tgt, on_error="fail").src == ["a\u2028b\x0cc\rd", "e"]


def test_clean_input_has_a_clean_report_and_max_lines(tmp_path):
    src = write(tmp_path / "s.gz", b"a\nb\nc\n", gz=True)
    tgt = write(tmp_path / "t", b"A\nB\nC\nD\n")
    text = read_parallel(src, tgt, max_lines=2)  # the mismatch lies past max_lines
    assert (text.src, text.tgt, text.report.clean) == (["a", "b"], ["A", "B"], True)


def test_invalid_policy_and_missing_file_are_clear(tmp_path):
    path = write(tmp_path / "s", b"a\n")
    with pytest.raises(ValueError, match="on_error must be one of"):
        read_parallel(path, path, on_error="ignore")
    with pytest.raises(FileNotFoundError, match="nope"):
        read_parallel(path, tmp_path / "nope")


def test_huge_line_is_dropped_alone_under_the_default_limit(tmp_path):
    """A 4 MB line (gzip, no word break) is one line_too_long pair; the pairs around it stay aligned."""
    huge = b"Haus" * 1_000_000
    src = write(tmp_path / "huge.de.gz", b"eins\n" + huge + b"\ndrei\n", gz=True)
    tgt = write(tmp_path / "huge.en", b"one\ntwo\nthree\n")
    text = read_parallel(src, tgt)
    assert (text.src, text.tgt) == (["eins", "drei"], ["one", "three"])
    assert text.report.counts == {"line_too_long": 1}
    assert text.report.messages == [f"{src}:2: line_too_long: 4000000 characters > max_line_chars=10000"]
    with pytest.raises(DataFormatError, match=rf"^{src}:2: line_too_long: 4000000 characters"):
        read_parallel(src, tgt, on_error="fail")


def test_crlf_only_line_is_both_a_windows_ending_and_an_empty_line(tmp_path):
    src = write(tmp_path / "s", b"a\r\n\r\nc\r\n")
    tgt = write(tmp_path / "t", b"A\nB\nC\n")
    text = read_parallel(src, tgt)
    assert (text.src, text.tgt) == (["a", "c"], ["A", "C"])
    assert text.report.counts == {"windows_line_ending": 3, "empty_line": 1}
    assert f"{src}:2: empty_line: line is empty or whitespace only" in text.report.messages
    with pytest.raises(DataFormatError, match=rf"^{src}:1: windows_line_ending"):
        read_parallel(src, tgt, on_error="fail")


def test_corrupt_gzip_names_the_file(tmp_path):
    good = gzip.compress(b"a\nb\n" * 1000)
    broken = write(tmp_path / "broken.gz", good[: len(good) // 2])
    with pytest.raises(OSError, match="broken.gz"):
        read_parallel(broken, broken)


@needs_data
@pytest.mark.parametrize("name, split, pairs", [("multi30k_de_en", "valid", 1014), ("iwslt14_de_en", "test", 6750),
                                                ("iwslt15_en_vi", "test", 1268), ("iwslt17_de_en", "valid", 888),
                                                ("small_enja_ja_en", "test", 500)])
def test_shared_corpora_read_clean_with_the_standard_split_sizes(name, split, pairs):
    src, tgt = get_corpus(name).files(split, DATA)
    text = read_parallel(src, tgt, on_error="fail")
    assert len(text) == pairs and text.report.clean


def test_corpus_registry_has_the_promised_names():
    assert set(CORPORA) >= {"multi30k_de_en", "multi30k_en_de", "iwslt14_de_en", "iwslt15_en_vi", "iwslt17_de_en",
                            "wmt14_en_de", "small_enja_en_ja", "small_enja_ja_en", "aspec_en_ja", "nist_zh_en"}
    for name, spec in CORPORA.items():  # fetched from an original source, or placed by hand (licensed corpora)
        assert bool(spec.remote_files) != (spec.builder == "manual"), name
    assert CORPORA["multi30k_en_de"].src_lang == "en" and CORPORA["multi30k_de_en"].src_lang == "de"
    assert CORPORA["multi30k_de_en"].splits["test"] == "test_2016_flickr"
    with pytest.raises(KeyError, match="known corpora"):
        get_corpus("wmt99")


def test_data_dir_env_var_overrides_default(monkeypatch, tmp_path):
    monkeypatch.setenv("MMA_NMT_DATA_DIR", str(tmp_path))
    assert default_data_dir() == tmp_path


def test_the_progress_counter_ends_on_the_lines_read(tmp_path, capsys):
    """The counter refreshes at most once a second and is cleared at the end; a log (no terminal to clear it) used to
    keep its first state, "read train.de.gz: 0 lines". Its last state is the count, and it writes no line of its own
    (a command's stderr stays its one-line error)."""
    src = write(tmp_path / "train.de.gz", b"".join(b"ein Haus %d\n" % i for i in range(7)), gz=True)
    tgt = write(tmp_path / "train.en", b"".join(b"a house %d\n" % i for i in range(7)))
    read_parallel(src, tgt, progress=True)
    err = capsys.readouterr().err
    states = [state.strip() for state in err.split("\r") if state.strip()]
    assert states[-1].startswith("read train.de.gz: 7 lines") and "\n" not in err
