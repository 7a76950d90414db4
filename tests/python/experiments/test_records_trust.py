"""Issue 50: a table rebuilt from its records never publishes less than it does, nor numbers from translations that are
not the ones a run was scored on; a broken record is named. On a copy of the committed MMA main table (mini scale),
rebuilt with ``--from-records`` (no training: the records hold every number, the test references are prepared once)."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import pytest

from mma_nmt.cli.main import main as cli
from mma_nmt.experiments.command import run_experiment
from mma_nmt.experiments.records import RECORD_FILE, load_records

REPO = Path(__file__).resolve().parents[3]
COMMITTED = REPO / "experiments" / "mma" / "results" / "mini"
TABLE = "main"
CHECKSUM_KEY = "translations_sha256"  # in record.json: the sha256 of the record's test.hyp.txt


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """One directory for the module: the mini Multi30k De-En test references are prepared once under its runs/data."""
    return tmp_path_factory.mktemp("records_trust")


@pytest.fixture
def results(workdir, monkeypatch) -> Path:
    """A fresh copy of the committed main table with its records."""
    monkeypatch.chdir(workdir)
    folder = workdir / "results"
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(COMMITTED / "runs", folder / "runs")
    for path in COMMITTED.glob(f"{TABLE}.*"):
        shutil.copy(path, folder / path.name)
    return folder


def rebuild(results: Path, **kwargs) -> list[Path]:
    return run_experiment("mma", tables=[TABLE], scale="mini", from_records=True, results_dir=results, **kwargs)


def record_of(results: Path, system: str, seed: int) -> Path:
    (found,) = (results / "runs" / "de_en").glob(f"{system}-seed{seed}-*/{RECORD_FILE}")
    return found


def published_cell(results: Path, system: str) -> dict:
    data = json.loads((results / f"{TABLE}.json").read_text(encoding="utf-8"))
    (row,) = [row for row in data["rows"] if row["system"] == system]
    return row["cells"]["de_en"]


def table_files(results: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in results.glob(f"{TABLE}.*")}


def test_a_missing_seed_never_rewrites_a_published_table(results, capsys):
    """Case 2: removing one seed's record used to rebuild the table over two seeds, with exit 0."""
    cell = published_cell(results, "mma")
    seed = cell["seeds"][0]
    compared = next(c for c in cell["per_seed"] if c["seed"] == seed)
    lost = f"mma on de_en seed {seed} ({cell['bleus'][0]:.2f}, Δ {compared['delta']:+.2f}††): no run"
    before = table_files(results)
    shutil.rmtree(record_of(results, "mma", seed).parent)
    argv = ["experiment", "mma", "--table", TABLE, "--scale", "mini", "--from-records", "--results-dir", str(results)]
    assert cli(argv) == 2
    # one error line; the test references are prepared on the module's first rebuild, whose progress bars and
    # sacreBLEU notes come before it when this test runs first on its worker
    errors = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert len(errors) == 1 and errors[0].startswith("mma-nmt: error: ") and lost in errors[0], errors
    assert "--allow-fewer" in errors[0]
    assert table_files(results) == before  # nothing written
    # said explicitly, the table is published with what is left
    (md,) = rebuild(results, allow_fewer=True)
    assert lost in capsys.readouterr().out
    assert f"Δ {compared['delta']:+.2f}††" not in md.read_text() and "(2 of 3 seeds)" in md.read_text()


def test_a_rebuild_that_would_drop_a_dagger_is_refused(results):
    """Case 2: fewer bootstrap samples cannot reach p < 0.01 (p >= 1/51), so every †† would become †."""
    before = table_files(results)
    with pytest.raises(RuntimeError, match=r"not rewritten: it publishes mma on de_en seed \d \(Δ \+\d\.\d\d††\): "
                                           r"would become Δ \+\d\.\d\d†;"):
        rebuild(results, bootstrap_samples=50)
    assert table_files(results) == before


def test_a_record_whose_translations_were_replaced_is_refused(results):
    """Case 11: the baseline's translations copied over a method's record used to rebuild its significance marks."""
    target = record_of(results, "mma", 1)
    shutil.copy(record_of(results, "baseline", 1).parent / "test.hyp.txt", target.parent / "test.hyp.txt")
    before = table_files(results)
    hypotheses = target.parent / "test.hyp.txt"
    with pytest.raises(ValueError, match=re.escape(f"{target}: its translations {hypotheses} were changed after the "
                                                   f"run was scored")):
        rebuild(results)
    assert table_files(results) == before


def test_a_record_without_a_checksum_is_refused_and_stamped_only_if_its_translations_give_its_scores(results):
    """Case 11: records written before the checksum are refused until stamped; stamping rescores their translations,
    so a replaced file cannot be blessed."""
    target = record_of(results, "mma", 1)
    record = json.loads(target.read_text(encoding="utf-8"))
    target.write_text(json.dumps({k: v for k, v in record.items() if k != CHECKSUM_KEY}), encoding="utf-8")
    with pytest.raises(ValueError, match=re.escape(f"{target} has no {CHECKSUM_KEY}") + ".*stamp_records"):
        load_records(results / "runs")
    from mma_nmt.experiments.stamp_records import stamp

    genuine = (target.parent / "test.hyp.txt").read_bytes()
    shutil.copy(record_of(results, "baseline", 1).parent / "test.hyp.txt", target.parent / "test.hyp.txt")
    with pytest.raises(ValueError, match=re.escape(f"{target}: not stamped: ") + ".* do not give the record's "
                                         "scores: bleu"):
        stamp(target)
    (target.parent / "test.hyp.txt").write_bytes(genuine)
    assert stamp(target) and not stamp(target)
    assert load_records(results / "runs")[record["identity"]][CHECKSUM_KEY] == record[CHECKSUM_KEY]


def test_a_corrupt_record_is_named_in_one_line(results, capsys):
    """Case 15: a cut record.json used to fail with json's "Expecting ..." and no file name."""
    target = record_of(results, "baseline", 2)
    target.write_text(target.read_text(encoding="utf-8")[:100], encoding="utf-8")
    argv = ["experiment", "mma", "--table", TABLE, "--scale", "mini", "--from-records", "--results-dir", str(results)]
    assert cli(argv) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and f"{target} is not a valid run record" in error, error


def test_a_short_translation_file_is_named(results):
    """Case 15: translations with fewer lines than the references (checksum and all) used to fail in the bootstrap
    with "baseline, system and references must have the same number of lines"."""
    target = record_of(results, "mma", 2)
    hypotheses = target.parent / "test.hyp.txt"
    hypotheses.write_text("".join(hypotheses.read_text(encoding="utf-8").splitlines(keepends=True)[:-1]),
                          encoding="utf-8")
    record = json.loads(target.read_text(encoding="utf-8"))
    checksum = hashlib.sha256(hypotheses.read_bytes()).hexdigest()
    target.write_text(json.dumps({**record, CHECKSUM_KEY: checksum}), encoding="utf-8")
    lines = record["metrics"]["sentences"]
    with pytest.raises(ValueError, match=re.escape(f"{hypotheses} has {lines - 1} lines but the references")
                                         + f".* have {lines}"):
        rebuild(results)
