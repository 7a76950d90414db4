"""Every paper's experiment file loads, and every table cell resolves to a valid run config at every scale the table
runs at; at the mini and smoke scales each distinct model is also built (with small vocabularies), so a size that does
not divide into the heads or a layer index beyond the model fails here rather than after data preparation."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from mma_nmt.experiments.spec import load_experiment, resolved_run_config
from mma_nmt.models import build_model

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"
PAPERS = sorted(p.parent.name for p in EXPERIMENTS.glob("*/experiment.toml"))


def test_the_five_papers_are_there():
    assert {"mma", "gmm", "lstm_multihead", "mlmha", "multihop"} <= set(PAPERS)


@pytest.mark.parametrize("paper", PAPERS)
def test_every_cell_resolves_and_small_models_build(paper):
    experiment = load_experiment(EXPERIMENTS / paper)
    built = set()
    for name, table in experiment.tables.items():
        for scale in table.scales:
            cells = experiment.cells(name, scale)
            assert cells or scale != "smoke", f"{paper}.{name}: nothing runs at smoke scale"
            for cell in cells:
                run = resolved_run_config(cell, Path("unused"))
                if scale == "full" or cell.identity in built:
                    continue
                built.add(cell.identity)
                build_model(replace(run.model, src_vocab_size=41, tgt_vocab_size=41))  # joint: shared embeddings
