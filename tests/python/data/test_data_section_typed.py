"""``RunConfig.data`` is a :class:`~mma_nmt.data.prepare.PrepareConfig` (issue 53): read when the run config is read,
from TOML, YAML or JSON alike, with ``--set data.<key>=...`` on top; its settings are attributes, and the settings the
``[data]`` table gave are kept apart from the defaults (those left out are the prepared folder's, docs/data.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from nmt_fixtures import MULTI30K

from mma_nmt.cli.main import main
from mma_nmt.data.prepare import PrepareConfig
from mma_nmt.pipeline import absolute_run_config
from mma_nmt.training.config import RunConfig, load_run_config, run_config_from_dict

SECTION = {"corpus": "iwslt14_de_en", "vocab_size": 600, "splits": ["train", "valid"], "character_coverage": 1}


def _write(path: Path, config: dict) -> Path:
    if path.suffix == ".json":
        path.write_text(json.dumps(config), encoding="utf-8")
    elif path.suffix == ".yaml":
        path.write_text(yaml.safe_dump(config), encoding="utf-8")
    else:  # TOML, by hand: one table of strings, numbers and lists of strings
        lines = []
        for table, values in config.items():
            lines.append(f"[{table}]")
            lines += [f"{key} = {json.dumps(value)}" for key, value in values.items()]
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_the_data_section_is_a_prepare_config_with_attributes():
    run = load_run_config(None, ["data.vocab_size=500", 'data.splits=["train", "valid"]'])
    assert isinstance(run.data, PrepareConfig)
    assert run.data.vocab_size == 500 and run.data.splits == ("train", "valid")
    assert run.data.model_type == "bpe"  # a setting left out has its default ...
    assert run.data.given_settings() == {"vocab_size", "splits"}  # ... and is not among the given ones
    assert RunConfig().data.given_settings() == frozenset()  # the default run config has an empty [data]


@pytest.mark.parametrize("suffix", [".toml", ".yaml", ".json"])
def test_each_file_format_reads_the_same_typed_data_and_set_overrides_it(tmp_path, suffix):
    path = _write(tmp_path / f"run{suffix}", {"data": SECTION})
    run = load_run_config(path)
    assert run.data == PrepareConfig(corpus="iwslt14_de_en", vocab_size=600, splits=("train", "valid"),
                                     character_coverage=1.0)
    assert run.data.to_section() == SECTION and run.data.given_settings() == set(SECTION)
    overridden = load_run_config(path, ["data.vocab_size=700", "data.lowercase=true"])
    assert (overridden.data.vocab_size, overridden.data.lowercase, overridden.data.corpus) == (700, True,
                                                                                                "iwslt14_de_en")
    assert overridden.data.given_settings() == set(SECTION) | {"lowercase"}


@pytest.mark.parametrize("suffix", [".toml", ".yaml", ".json"])
def test_an_unknown_data_key_in_a_file_is_refused_when_the_config_is_read(tmp_path, suffix):
    path = _write(tmp_path / f"run{suffix}", {"data": {**SECTION, "vocab_sise": 500}})
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['vocab_sise'\] in data"):
        load_run_config(path)


def test_a_run_config_refuses_an_untyped_data_table():
    with pytest.raises(TypeError, match="RunConfig.data must be a PrepareConfig.*PrepareConfig.from_section"):
        RunConfig(data={"vocab_size": 500})


def test_the_saved_run_config_keeps_the_given_data_settings_only():
    """``run_config.json`` (``absolute_run_config``) holds the ``[data]`` it was given, not the defaults: read back,
    a setting left out is still the prepared folder's."""
    run = load_run_config(None, ["data.vocab_size=320", "data.out_dir=runs/data/here"])
    saved = absolute_run_config(run)
    assert saved["data"] == {"vocab_size": 320, "out_dir": str(Path("runs/data/here").resolve())}
    assert run_config_from_dict(saved).data.given_settings() == {"vocab_size", "out_dir"}


def test_set_data_vocab_size_reaches_prepare_from_the_command_line(tmp_path, capsys):
    out_dir = tmp_path / "data"
    path = _write(tmp_path / "run.toml", {"data": {
        "corpus": "multi30k_de_en", "data_dir": str(MULTI30K.parent), "out_dir": str(out_dir), "vocab_size": 320,
        "max_train_lines": 50, "splits": ["train", "valid"], "progress": False, "workers": 1}})
    assert main(["prepare", "--config", str(path), "--set", "data.vocab_size=300"]) == 0, capsys.readouterr().err
    meta = json.loads((out_dir / "meta.json").read_text(encoding="utf-8"))
    assert meta["config"]["vocab_size"] == 300 and meta["vocab"]["requested_size"] == 300
    assert meta["config"]["max_train_lines"] == 50  # the file's other settings were applied too
