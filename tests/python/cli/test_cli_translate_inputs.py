"""What ``translate`` makes of its input and where it writes (issue 50, cases 4 and 13): an empty or whitespace-only
line gives an empty line (the line count kept, the number reported on stderr), in the command and in the Python API;
the output file is written atomically."""

from __future__ import annotations

import errno
import io

import pytest

from mma_nmt.cli.main import main
from mma_nmt.data import Tokenizer
from mma_nmt.decoding.translate import translate_texts
from mma_nmt.training.checkpoint import load_model
from mma_nmt.training.config import load_run_config
from nmt_fixtures import trained_tiny_run

WITH_BLANKS = "Ein Hund.\n\n   \nEine Katze.\n"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A 2-step tiny Transformer on the tiny data: (run-config overrides, checkpoint, prepared data)."""
    return trained_tiny_run(tmp_path_factory, "translate_inputs_run")


def _sets(overrides) -> list[str]:
    return [item for o in overrides for item in ("--set", o)]


def test_blank_input_lines_give_empty_output_lines_and_are_counted(trained, tmp_path, capsys):
    overrides, checkpoint, _ = trained
    source, out = tmp_path / "blanks.de", tmp_path / "blanks.hyp"
    source.write_text(WITH_BLANKS, encoding="utf-8")
    status = main(["translate", *_sets(overrides), "--checkpoint", str(checkpoint), "--input", str(source),
                   "--output", str(out)])
    err = capsys.readouterr().err
    assert status == 0, err
    lines = out.read_text(encoding="utf-8").split("\n")
    assert len(lines) == 5 and lines[4] == ""  # four lines, each ended by a newline
    assert lines[1] == "" and lines[2] == "", lines
    assert "2 empty or whitespace-only line(s)" in err and "(line 2, 3)" in err


def test_the_python_api_keeps_blank_lines_empty(trained):
    overrides, checkpoint, data = trained
    run = load_run_config(None, overrides)
    src, tgt = Tokenizer.load(data / "spm_src.model"), Tokenizer.load(data / "spm_tgt.model")
    model, _ = load_model(checkpoint, tokenizers=(src, tgt))
    texts = WITH_BLANKS.split("\n")[:-1] + ["\t"]
    lines = translate_texts(model, texts, run.decode, src_tokenizer=src, tgt_tokenizer=tgt)
    assert len(lines) == 5
    assert [lines[1], lines[2], lines[4]] == ["", "", ""]


class _DiskFullAfterHalf:
    """A file opened for writing that takes half of the first write, then fails as a full disk does."""

    def __init__(self, handle):
        self._handle = handle

    def write(self, data):
        self._handle.write(data[:len(data) // 2])
        self._handle.flush()
        raise OSError(errno.ENOSPC, "No space left on device")

    def __getattr__(self, name):
        return getattr(self._handle, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._handle.close()
        return False


@pytest.mark.parametrize("existing", [True, False])
def test_a_failed_write_leaves_the_output_path_untouched(trained, tmp_path, capsys, monkeypatch, existing):
    overrides, checkpoint, _ = trained
    source, out = tmp_path / "many.de", tmp_path / "out" / "many.hyp"
    source.write_text("Ein Hund läuft.\n" * 40, encoding="utf-8")
    if existing:
        out.parent.mkdir()
        out.write_text("the previous translations\n", encoding="utf-8")
    real_open = io.open

    def failing_open(file, mode="r", *args, **kwargs):
        handle = real_open(file, mode, *args, **kwargs)
        return _DiskFullAfterHalf(handle) if any(flag in mode for flag in "wax+") else handle

    monkeypatch.setattr(io, "open", failing_open)
    status = main(["translate", *_sets(overrides), "--checkpoint", str(checkpoint), "--input", str(source),
                   "--output", str(out)])
    monkeypatch.undo()
    err = capsys.readouterr().err
    if existing:
        assert out.read_text(encoding="utf-8") == "the previous translations\n"
        assert sorted(p.name for p in out.parent.iterdir()) == ["many.hyp"]  # no temporary file left
    else:
        assert not out.exists()
    assert status == 2 and f"no space left on {out.parent} (writing {out.name}; the file is unchanged" in err, err
