"""A committed record keeps its run identity (issue 53): records are filed and found by a hash of the raw run config
(:func:`mma_nmt.experiments.spec.run_identity`), so typing the run config (``[data]`` read into a ``PrepareConfig``)
must change neither the hash nor the ``[data]`` table it is computed from, and ``mma-nmt experiment <paper>
--status`` / ``--from-records`` must still resolve a cell for every record."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from mma_nmt.experiments.spec import load_experiment, run_identity
from mma_nmt.training.config import run_config_from_dict

REPO = Path(__file__).resolve().parents[3]
RECORDS = sorted(REPO.glob("experiments/*/results/*/runs/*/*/record.json"))  # the tables' records
ALL_RECORDS = sorted(REPO.glob("experiments/*/results/**/record.json"))  # and superseded ones kept beside them


def _record(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def test_there_are_committed_records():
    assert len(RECORDS) >= 80, f"expected the committed records under {REPO}/experiments, found {len(RECORDS)}"
    assert set(RECORDS) <= set(ALL_RECORDS)


@pytest.mark.parametrize("path", ALL_RECORDS,
                         ids=[str(p.parent.relative_to(REPO / "experiments")) for p in ALL_RECORDS])
def test_a_record_identity_is_recomputed_from_its_stored_config(path):
    record = _record(path)
    assert run_identity(record["config"], record["average_last"]) == record["identity"]
    assert path.parent.name.endswith(f"-{record['identity']}")


@pytest.mark.parametrize("path", ALL_RECORDS,
                         ids=[str(p.parent.relative_to(REPO / "experiments")) for p in ALL_RECORDS])
def test_the_typed_data_section_writes_back_the_table_the_identity_hashes(path):
    record = _record(path)
    run = run_config_from_dict(copy.deepcopy(record["config"]))
    assert run.data.to_section() == record["config"].get("data", {})
    rewritten = {**record["config"], "data": run.data.to_section()}
    assert run_identity(rewritten, record["average_last"]) == record["identity"]


def _identities(paper: Path) -> set[str]:
    """The identity of every cell of every table of ``paper`` at every scale it runs at."""
    experiment = load_experiment(paper)
    return {cell.identity for name, table in experiment.tables.items() for scale in table.scales
            for cell in experiment.cells(name, scale)}


@pytest.mark.parametrize("paper", sorted({p.parents[5].name for p in RECORDS}))
def test_the_experiment_still_resolves_a_cell_for_every_record(paper):
    records = {_record(p)["identity"]: p for p in RECORDS if p.parents[5].name == paper}
    lost = sorted(str(p.relative_to(REPO)) for identity, p in records.items()
                  if identity not in _identities(REPO / "experiments" / paper))
    assert not lost, f"records no cell of {paper}'s experiment.toml resolves to: {lost}"
