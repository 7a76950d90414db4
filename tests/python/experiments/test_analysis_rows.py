"""An analysis report keeps the rows of seeds analysed on another machine (``with_rows_measured_elsewhere``)."""

from __future__ import annotations

import json

from mma_nmt.experiments.analysis_cli import (analysis_parser, measurement_settings, seed_text,
                                              with_rows_measured_elsewhere)
from mma_nmt.experiments.command import experiment_named


def _identity(system: str, seed: int, scale: str) -> str:
    return experiment_named("gmm").cell(system, "en_de", scale, seed=seed).identity


def _row(system: str, seed: int, aer: float, *, identity: str | None = None, scale: str = "smoke") -> dict:
    return {"system": system, "seed": seed, "identity": identity or _identity(system, seed, scale), "layer": 1,
            "aer": aer}


def test_rows_of_models_left_on_another_machine_are_kept_and_marked_and_stale_ones_dropped(tmp_path):
    """Seed 1's model is not here: its earlier row survives, starred. Seed 2 is measured again: the new row replaces
    the earlier one. Seed 3's earlier row measured a run the table no longer names (its config changed): dropped."""
    args = analysis_parser("An analysis.", dataset="en_de").parse_args(["--scale", "smoke"])
    path = tmp_path / "rows.json"
    earlier = [_row("ours", 1, 80.0), _row("ours", 2, 81.0), _row("ours", 3, 82.0, identity="0123456789")]
    path.write_text(json.dumps({"settings": measurement_settings(args), "rows": earlier}))

    rows = with_rows_measured_elsewhere(path, [_row("ours", 2, 79.5)], "gmm", "main", {"ours": [1, 3]}, args)

    assert [(row["seed"], row["aer"], row.get("measured_elsewhere", False)) for row in rows] == [
        (1, 80.0, True), (2, 79.5, False)]
    assert [seed_text(row) for row in rows] == ["1*", "2"]
    assert json.loads(path.read_text()) == {"settings": measurement_settings(args), "rows": rows}  # for the next machine


def test_rows_measured_with_other_settings_are_not_mixed_in_and_the_command_says_so(tmp_path, capsys):
    """A quick check on 12 sentences must not sit beside seeds measured on 300 as if they were comparable."""
    parser = analysis_parser("An analysis.", dataset="en_de")
    full, quick = (parser.parse_args(["--scale", "smoke", *extra]) for extra in ([], ["--sentences", "12"]))
    path = tmp_path / "rows.json"
    path.write_text(json.dumps({"settings": measurement_settings(full), "rows": [_row("ours", 1, 80.0)]}))

    rows = with_rows_measured_elsewhere(path, [_row("ours", 2, 79.5)], "gmm", "main", {"ours": [1]}, quick)

    assert [row["seed"] for row in rows] == [2]
    assert "not keeping 1 rows" in capsys.readouterr().err
    assert json.loads(path.read_text())["settings"]["sentences"] == 12
    assert measurement_settings(parser.parse_args(["--scale", "smoke", "--runs-dir", "elsewhere"])) == (
        measurement_settings(full))  # where the runs are is not what is measured


def test_a_converged_analysis_keeps_rows_of_the_convergence_tables_runs(tmp_path):
    """With ``--converged`` the models are the convergence table's X_to_patience runs: their identities, not the
    main table's, decide which earlier rows still stand (at mini scale, where the two differ in their cap)."""
    args = analysis_parser("An analysis.", dataset="en_de").parse_args(["--scale", "mini", "--converged"])
    path = tmp_path / "rows.json"
    converged, capped = _row("ours_to_patience", 1, 80.0, scale="mini"), _row("ours", 1, 81.0, scale="mini")
    path.write_text(json.dumps({"settings": measurement_settings(args), "rows": [converged, capped]}))

    rows = with_rows_measured_elsewhere(path, [], "gmm", "main", {"ours": [1]}, args)

    assert [(row["system"], row["aer"]) for row in rows] == [("ours_to_patience", 80.0)]


def test_without_an_earlier_file_the_measured_rows_are_written(tmp_path):
    args = analysis_parser("An analysis.", dataset="en_de").parse_args(["--scale", "smoke"])
    path = tmp_path / "analysis" / "rows.json"
    path.parent.mkdir()
    measured = [_row("baseline", 2, 79.0), _row("baseline", 1, 78.0)]

    rows = with_rows_measured_elsewhere(path, measured, "gmm", "main", {}, args)

    assert [row["seed"] for row in rows] == [1, 2] and not any("measured_elsewhere" in row for row in rows)
    assert json.loads(path.read_text())["rows"] == rows
