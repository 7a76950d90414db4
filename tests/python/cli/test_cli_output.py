"""What the command line shows a person: the command list, --version, an example in every --help, and the summaries."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from mma_nmt.cli import summary
from mma_nmt.cli.main import EXAMPLES, build_parser, main

COMMANDS = ["prepare", "train", "translate", "evaluate", "average", "export", "experiment", "demo"]


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mma_nmt", *args], capture_output=True, text=True, timeout=300)


def test_no_arguments_lists_every_command_on_one_line(capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    listed = [line.split()[0] for line in out.splitlines() if line.startswith("  ")]
    assert listed == COMMANDS
    for command in COMMANDS:
        line = next(line for line in out.splitlines() if line.startswith(f"  {command} "))
        assert len(line.split()) > 2, line  # the name and a description


def test_version_names_the_package_and_torch():
    import torch

    import mma_nmt

    result = _cli("--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"mma-nmt {mma_nmt.__version__} (torch {torch.__version__}")


@pytest.mark.parametrize("command", COMMANDS)
def test_every_help_ends_with_an_example(command, capsys):
    with pytest.raises(SystemExit) as stop:
        build_parser().parse_args([command, "--help"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    assert "example:" in out and EXAMPLES[command].split("\n")[0] in out
    assert EXAMPLES[command].startswith(f"mma-nmt {command}")


def _scores(**extra) -> dict:
    rows = [{"label": "(0, 10]", "low": 0, "high": 10, "sentences": 3, "bleu": 31.234},
            {"label": "(10, 20]", "low": 10, "high": 20, "sentences": 0, "bleu": None},
            {"label": "(20, inf)", "low": 20, "high": None, "sentences": 2, "bleu": 12.5}]
    return {"bleu": 28.4123, "bleu_signature": "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0",
            "chrf": 55.01, "ter": 61.7, "tokenized_bleu": 29.0, "sentences": 5, "bleu_by_source_length": rows,
            **extra}


def test_summary_shows_scores_signature_and_the_non_empty_length_buckets():
    lines = summary.scores_lines(_scores())
    assert lines[0] == "BLEU   28.41   nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0"
    assert lines[1] == "chrF   55.01" and lines[2] == "TER    61.70"
    table = lines[lines.index("BLEU by source length (words)") + 2:]
    assert [row.split() for row in table] == [["(0,", "10]", "3", "31.23"], ["(20,", "inf)", "2", "12.50"]]


def test_summary_shows_the_bootstrap_when_there_is_a_baseline():
    boot = {"samples": 100, "baseline_bleu": 27.0, "system_bleu": 28.41, "system_mean": 28.3, "system_ci": 1.1,
            "p_value": 0.02}
    text = "\n".join(summary.scores_lines(_scores(bootstrap=boot)))
    assert "paired bootstrap (100 samples): baseline BLEU 27.00, this system 28.41" in text and "p = 0.0200" in text


def test_report_writes_json_to_the_file_and_prints_it_only_when_asked(tmp_path, capsys):
    path = tmp_path / "deep" / "test.scores.json"
    summary.report(_scores(), ["the summary"], json_path=path, as_json=False)
    assert capsys.readouterr().out == "the summary\n"
    assert json.loads(path.read_text(encoding="utf-8"))["bleu"] == 28.4123
    summary.report(_scores(), ["the summary"], json_path=None, as_json=True)
    assert json.loads(capsys.readouterr().out)["chrf"] == 55.01


@pytest.mark.parametrize("hyp, scores", [("runs/x/translations/test.hyp.txt", "runs/x/translations/test.scores.json"),
                                         ("out/system.txt", "out/system.scores.json"),
                                         ("out/system.en", "out/system.en.scores.json")])
def test_scores_file_sits_beside_the_hypotheses(hyp, scores):
    assert str(summary.scores_path(hyp)) == scores
