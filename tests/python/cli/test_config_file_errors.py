"""Config files (issue 50, cases 15 and 16): a UTF-8 byte order mark is accepted (TOML forbids it, but Windows editors
write it), and a file that does not parse gives one line naming the file, line and column, not PyYAML's four."""

from __future__ import annotations

import re

import pytest

from mma_nmt.cli.main import main
from mma_nmt.training.config import load_run_config

BOM = b"\xef\xbb\xbf"


@pytest.mark.parametrize("name, text", [("run.toml", b'[train]\nmax_steps = 7\n'),
                                        ("run.yaml", b'train:\n  max_steps: 7\n'),
                                        ("run.json", b'{"train": {"max_steps": 7}}\n')])
def test_a_config_file_with_a_utf8_byte_order_mark_is_read(tmp_path, name, text):
    path = tmp_path / name
    path.write_bytes(BOM + text)
    assert load_run_config(path).train.max_steps == 7


@pytest.mark.parametrize("name, text, where", [
    ("run.yaml", "train:\n  max_steps: [1\n  seed: 2\n", r"run.yaml:3:7: not valid YAML: expected ',' or ']'"),
    ("run.toml", "[train]\nmax_steps = = 1\n", r"run.toml: not valid TOML: .*line 2"),
    ("run.json", '{"train": {"max_steps": 1,}}', r"run.json:1:27: not valid JSON")])
def test_a_config_file_that_does_not_parse_gives_one_line_naming_it(tmp_path, capsys, name, text, where):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    assert main(["train", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith(f"mma-nmt: error: {tmp_path}/") and re.search(where, err), err
