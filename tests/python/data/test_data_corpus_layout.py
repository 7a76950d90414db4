"""The corpus layout is known in one place (issue 53): :meth:`CorpusSpec.locate` finds the files of any splits under
several data directories in one call, :meth:`CorpusSpec.reference_sets` reads the references of the first directory
holding the corpus, and the data package never imports the evaluation package above it."""

from __future__ import annotations

import ast
import gzip
from pathlib import Path

import pytest

import mma_nmt
from mma_nmt.data.corpora import CorpusSpec
from mma_nmt.data.prepare import PrepareConfig

TOY = CorpusSpec(name="toy", src_lang="zh", tgt_lang="en", splits={"train": "train", "valid": "dev", "test": "all"},
                 local_folder="toy", test_sets=("mt03",), references=2)


def _write(path: Path, lines: list[str], compress: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = "".join(line + "\n" for line in lines).encode()
    path.write_bytes(gzip.compress(data) if compress else data)
    return path


def test_locate_takes_each_split_from_the_first_directory_holding_both_of_its_files(tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    train = (_write(first / "toy" / "train.zh.gz", ["a"], compress=True), _write(first / "toy" / "train.en", ["b"]))
    _write(second / "toy" / "train.zh", ["other"])
    _write(second / "toy" / "train.en", ["other"])
    _write(first / "toy" / "dev.zh", ["half of a split"])  # no dev.en here: the split is taken from `second`
    dev = (_write(second / "toy" / "dev.zh", ["c"]), _write(second / "toy" / "dev.en", ["d"]))
    assert TOY.locate(["train", "valid", "test"], [first, second]) == {"train": train, "valid": dev}
    assert TOY.locate(["valid"], [first]) == {}
    with pytest.raises(KeyError, match=r"toy has no split 'tset'; its splits are \['test', 'train', 'valid'\]"):
        TOY.locate(["tset"], [first])


def test_reference_sets_are_read_from_the_first_directory_holding_the_corpus(tmp_path):
    empty, data = tmp_path / "empty", tmp_path / "data"
    empty.mkdir()
    _write(data / "toy" / "mt03.en0", ["a b", "c d"])
    _write(data / "toy" / "mt03.en1.gz", ["a x", "c y"], compress=True)
    (only,) = TOY.reference_sets(empty, data)
    assert (only.name, only.references) == ("mt03", [["a b", "c d"], ["a x", "c y"]])


def test_corpus_roots_are_the_data_directory_then_a_distinct_download_directory(tmp_path):
    assert PrepareConfig(data_dir=str(tmp_path)).corpus_roots() == [tmp_path]
    assert PrepareConfig(data_dir=str(tmp_path), download_dir=str(tmp_path)).corpus_roots() == [tmp_path]
    assert PrepareConfig(data_dir=str(tmp_path), download_dir=str(tmp_path / "dl")).corpus_roots() == [
        tmp_path, tmp_path / "dl"]


def _imported_modules(path: Path) -> set[str]:
    modules = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            modules.add(node.module)
        elif isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
    return modules


def test_the_data_package_imports_nothing_above_it():
    package = Path(mma_nmt.__file__).parent / "data"
    above = ("mma_nmt.evaluation", "mma_nmt.training", "mma_nmt.experiments", "mma_nmt.pipeline", "mma_nmt.demos")
    upward = {f"{path.name}: {module}" for path in sorted(package.glob("*.py")) for module in _imported_modules(path)
              if module.startswith(above)}
    assert not upward

