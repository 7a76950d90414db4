"""What the commands read at run time ships inside the package, so that an installed wheel works from any folder
(issue 51, point 4), and a command that needs the repository says so in one line. The wheel itself is built, installed
in a fresh virtual environment and run from outside the checkout by .ci/wheel_check.sh."""

from __future__ import annotations

from pathlib import Path

import mma_nmt
from mma_nmt.cli import main as cli
from mma_nmt.experiments import command

PACKAGE = Path(mma_nmt.__file__).resolve().parent
REPO = Path(__file__).resolve().parents[3]


def test_the_demo_config_is_package_data_and_the_repository_path_points_at_it():
    assert cli.DEMO_CONFIG.is_file()
    assert cli.DEMO_CONFIG.resolve().is_relative_to(PACKAGE)
    assert cli.build_parser().parse_args(["demo"]).config == str(cli.DEMO_CONFIG)
    assert (REPO / cli.TINY).resolve() == cli.DEMO_CONFIG.resolve()  # the documented path: one file, not a copy


def test_experiment_outside_a_source_checkout_says_so_in_one_line(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(command, "EXPERIMENTS_DIR", tmp_path / "site-packages" / "experiments")
    assert cli.main(["experiment", "mma", "--status"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1
    assert error.startswith("mma-nmt: error: no experiment 'mma': mma-nmt experiment needs a source checkout")
