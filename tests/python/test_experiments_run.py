"""Running tables end to end at the smoke scale on real Multi30k data: reports, skipping finished runs, resuming,
failures that lose nothing, and the significance column on constructed outputs."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from mma_nmt.experiments.command import run_experiment
from mma_nmt.experiments.report import build_table, significance_mark, to_markdown
from mma_nmt.experiments.spec import load_experiment

REPO = Path(__file__).resolve().parents[2]
SMOKE_BASE = REPO / "experiments" / "common" / "smoke_multi30k_de_en.toml"
PAPERS = sorted(p.parent.name for p in (REPO / "experiments").glob("*/experiment.toml"))

TOY = f"""
name = "toy"
title = "A toy paper"
[datasets.de_en]
label = "De-En"
smoke = {{ base = "{SMOKE_BASE}" }}
[systems.baseline]
label = "Base"
[systems.mma]
label = "MMA"
set = {{ "model.encoder.attention" = "mma", "model.encoder.head_spec" = "GLFB" }}
[tables.t]
title = "Toy table"
columns = ["de_en"]
rows = ["baseline", "mma"]
baseline = "baseline"
paper = {{ baseline = {{ de_en = 30.0 }}, mma = {{ de_en = 31.5 }} }}
"""


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """One directory for the module: the smoke corpus is prepared once under its runs/data."""
    return tmp_path_factory.mktemp("experiments")


@pytest.fixture
def toy(workdir, monkeypatch):
    monkeypatch.chdir(workdir)
    folder = workdir / "toy"
    folder.mkdir(exist_ok=True)
    (folder / "experiment.toml").write_text(textwrap.dedent(TOY))
    return folder


def run_dirs(workdir: Path) -> dict[str, Path]:
    return {p.name.rsplit("-", 1)[0]: p for p in (workdir / "runs" / "experiments" / "smoke").glob("*/*")}


def test_table_is_written_and_finished_runs_are_skipped(toy, workdir, capsys):
    (md,) = run_experiment(str(toy), scale="smoke", runs_dir="runs/experiments", command="toy command")
    data = json.loads(md.with_suffix(".json").read_text())
    assert [row["system"] for row in data["rows"]] == ["baseline", "mma"]
    mma = data["rows"][1]["cells"]["de_en"]
    base = data["rows"][0]["cells"]["de_en"]
    assert mma["delta"] == pytest.approx(mma["bleu"] - base["bleu"])
    assert 0.0 <= mma["p_value"] <= 1.0 and mma["paper_delta"] == 1.5
    assert "delta" not in base and base["paper"] == 30.0
    assert len(data["runs"]) == 2 and all(run["parameters"] > 0 for run in data["runs"])
    text = md.read_text()
    assert "| MMA |" in text and "Command: `toy command`" in text and "31.50" in text
    capsys.readouterr()
    run_experiment(str(toy), scale="smoke", runs_dir="runs/experiments")
    assert "2 runs, 2 already finished, 0 to run" in capsys.readouterr().out


def test_interrupted_run_resumes_from_its_last_checkpoint(toy, workdir):
    run_experiment(str(toy), scale="smoke", runs_dir="runs/experiments")
    run_dir = run_dirs(workdir)["mma"]
    before = json.loads((run_dir / "result.json").read_text())
    (run_dir / "result.json").unlink()  # as if killed after training, before scoring
    run_experiment(str(toy), scale="smoke", runs_dir="runs/experiments")
    after = json.loads((run_dir / "result.json").read_text())
    events = [json.loads(line)["event"] for line in (run_dir / "log.jsonl").read_text().splitlines()]
    assert "resume" in events and after["resumed"] >= 1
    assert after["train_steps"] == before["train_steps"] == 4
    assert after["bleu"] == before["bleu"]
    assert (run_dir / "translations" / "test.hyp.txt").read_text() == Path(before["hypotheses"]).read_text()


def test_a_failing_run_loses_nothing_else(toy, workdir):
    text = (toy / "experiment.toml").read_text()
    broken = text.replace('[systems.mma]', '[systems.broken]\nlabel = "Broken"\n'
                          'set = { "model.encoder.attention" = "unknown" }\n[systems.mma]')  # fails building the model
    broken = broken.replace('rows = ["baseline", "mma"]', 'rows = ["baseline", "mma", "broken"]')
    (toy / "experiment.toml").write_text(broken)
    with pytest.raises(RuntimeError, match="broken on de_en"):
        run_experiment(str(toy), scale="smoke", runs_dir="runs/experiments")
    data = json.loads((toy / "results" / "smoke" / "t.json").read_text())
    assert [row["cells"]["de_en"]["bleu"] is None for row in data["rows"]] == [False, False, True]


def test_significance_column_on_constructed_outputs(toy, workdir):
    """A system that outputs the references beats one that outputs a fixed word: significant at p < 0.01."""
    run_experiment(str(toy), scale="smoke", runs_dir="runs/experiments")
    experiment = load_experiment(toy)
    runs = run_dirs(workdir)
    results = {}
    for name, lines_of in (("baseline", lambda refs: ["a"] * len(refs)), ("mma", lambda refs: refs)):
        result = json.loads((runs[name] / "result.json").read_text())
        from mma_nmt.data import ParallelDataset
        refs = ParallelDataset.load(workdir / "runs" / "data" / "smoke_multi30k_de_en", "test").tgt_text
        fake = workdir / f"{name}.fake.txt"
        fake.write_text("".join(line + "\n" for line in lines_of(refs)))
        results[result["identity"]] = {**result, "hypotheses": str(fake), "bleu": 100.0 if name == "mma" else 0.0,
                                       "run_dir": str(runs[name])}
    data = build_table(experiment, experiment.tables["t"], "smoke", results, bootstrap_samples=200)
    cell = data["rows"][1]["cells"]["de_en"]
    assert cell["delta"] == 100.0 and cell["p_value"] < 0.01 and cell["significant"]
    assert "+100.00††" in to_markdown(data)
    assert significance_mark(0.2) == " (n.s.)" and significance_mark(0.03) == "†"


@pytest.mark.parametrize("paper", PAPERS)
def test_every_table_runs_end_to_end_at_smoke_scale(paper, workdir, monkeypatch):
    """Every configuration of every paper trains, decodes and is scored (the scores mean nothing at this scale)."""
    monkeypatch.chdir(workdir)
    written = run_experiment(paper, scale="smoke", runs_dir="runs/experiments", results_dir=f"results/{paper}")
    experiment = load_experiment(REPO / "experiments" / paper)
    assert {p.stem for p in written} == {t for t, table in experiment.tables.items() if "smoke" in table.scales}
    for path in written:
        data = json.loads(path.with_suffix(".json").read_text())
        for row in data["rows"]:
            for column, cell in row["cells"].items():
                if experiment.has_recipe(column, "smoke"):
                    assert cell["bleu"] is not None, (path.stem, row["system"], column)


def test_side_by_side_runs_match_runs_done_one_at_a_time(toy, workdir):
    (serial,) = run_experiment(str(toy), scale="smoke", runs_dir="runs/experiments", results_dir="results/serial")
    (parallel,) = run_experiment(str(toy), scale="smoke", runs_dir="runs/parallel", jobs=2,
                                 results_dir="results/parallel")
    logs = list((workdir / "runs" / "parallel" / "smoke").glob("*/*/run.log"))
    assert len(logs) == 2
    one, two = (json.loads(p.with_suffix(".json").read_text()) for p in (serial, parallel))
    assert [r["bleu"] for r in one["runs"]] == [r["bleu"] for r in two["runs"]]
    assert [r["valid_nll"] for r in one["runs"]] == [r["valid_nll"] for r in two["runs"]]
