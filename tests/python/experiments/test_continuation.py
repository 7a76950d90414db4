"""A raised update cap continues the capped run (mma_nmt.experiments.runner): the continued run ends with the
weights of a run trained with the higher cap from update 0, its record says which run it continued, and runs that
differ in more than the cap, or whose schedule reads the cap, are never continued."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import torch

from mma_nmt.experiments.command import run_experiment
from mma_nmt.experiments.runner import capped_predecessor, continue_from, holds_run
from mma_nmt.experiments.records import load_records
from mma_nmt.experiments.spec import load_experiment

REPO = Path(__file__).resolve().parents[3]
SMOKE_BASE = REPO / "experiments" / "common" / "smoke_multi30k_de_en.toml"

EXPERIMENT = f"""
name = "capped"
title = "Raising a cap"
[datasets.de_en]
label = "De-En"
smoke = {{ base = "{SMOKE_BASE}", set = {{ "train.validate_every" = 2 }}, label = "Multi30k De-En, smoke subset" }}
[systems.base]
label = "Base, 4 updates"
[systems.base_longer]
label = "Base, 8 updates"
scale_set = {{ smoke = {{ "train.max_steps" = 8 }} }}
[systems.base_longer_cosine]
label = "Base, 8 updates, cosine schedule"
scale_set = {{ smoke = {{ "train.max_steps" = 8, "train.optim.schedule" = "cosine" }} }}
[systems.base_cosine]
label = "Base, 4 updates, cosine schedule"
scale_set = {{ smoke = {{ "train.optim.schedule" = "cosine" }} }}
[systems.other_lr_longer]
label = "Another learning rate, 8 updates"
scale_set = {{ smoke = {{ "train.max_steps" = 8, "train.optim.lr" = 0.002 }} }}
[systems.every3]
label = "Base, 4 updates, validated every 3"
scale_set = {{ smoke = {{ "train.validate_every" = 3 }} }}
[systems.every3_longer]
label = "Base, 8 updates, validated every 3"
scale_set = {{ smoke = {{ "train.validate_every" = 3, "train.max_steps" = 8 }} }}
[systems.base_to_patience]
label = "Base, 6 updates (the convergence table's copy of base)"
scale_set = {{ smoke = {{ "train.max_steps" = 6 }} }}
[tables.short]
title = "4 updates"
columns = ["de_en"]
rows = ["base", "base_cosine", "every3"]
baseline = "base"
[tables.long]
title = "8 updates"
columns = ["de_en"]
rows = ["base", "base_longer"]
baseline = "base"
[tables.convergence]
title = "4 updates and trained on"
columns = ["de_en"]
rows = ["base", "base_to_patience"]
baseline = "base"
"""


@pytest.fixture(scope="module")
def experiment(tmp_path_factory):
    """The experiment, with the 4-update runs of ``base``, ``base_cosine`` and ``every3`` finished under
    runs/capped."""
    folder = tmp_path_factory.mktemp("continuation")
    (folder / "capped").mkdir()
    (folder / "capped" / "experiment.toml").write_text(textwrap.dedent(EXPERIMENT))
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(folder)
        run_experiment(str(folder / "capped"), scale="smoke", runs_dir="runs/capped", tables=["short"])
    return folder


def _run_dir(folder: Path, runs: str, system: str) -> Path:
    identity = load_experiment(folder / "capped").cell(system, "de_en", "smoke").identity
    (found,) = (folder / runs / "smoke").glob(f"*/*-{identity}")
    return found


def _weights(run_dir: Path) -> dict:
    return torch.load(run_dir / "last.pt", map_location="cpu", weights_only=False)["model"]


def test_raised_cap_continues_the_capped_run_to_the_weights_of_an_uncapped_run(experiment, monkeypatch, capsys):
    monkeypatch.chdir(experiment)
    run_experiment(str(experiment / "capped"), scale="smoke", runs_dir="runs/capped", tables=["long"],
                   systems=["base_longer"])
    assert "continues" in capsys.readouterr().out
    continued = _run_dir(experiment, "runs/capped", "base_longer")
    events = [json.loads(line) for line in (continued / "log.jsonl").read_text().splitlines()]
    (event,) = [e for e in events if e["event"] == "continue"]
    assert event["step"] == 4 and event["max_steps"] == 4 and event["stopped"] == "max_steps"
    assert event["identity"] == _run_dir(experiment, "runs/capped", "base").name.rsplit("-", 1)[1]
    assert [e["step"] for e in events if e["event"] == "end"] == [4, 8]

    # the same system trained from update 0 where no capped run exists (records elsewhere: these would count it done)
    run_experiment(str(experiment / "capped"), scale="smoke", runs_dir="runs/fresh", tables=["long"],
                   systems=["base_longer"], results_dir=experiment / "fresh_results")
    fresh = _run_dir(experiment, "runs/fresh", "base_longer")
    assert not [line for line in (fresh / "log.jsonl").read_text().splitlines() if '"continue"' in line]
    a, b = _weights(continued), _weights(fresh)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    capped = _weights(_run_dir(experiment, "runs/capped", "base"))
    assert not all(torch.equal(a[k], capped[k]) for k in a)  # updates 5-8 did train
    assert (continued / "translations" / "test.hyp.txt").read_text() == (fresh / "translations" /
                                                                         "test.hyp.txt").read_text()

    records = load_records(experiment / "capped" / "results" / "smoke" / "runs")
    (record,) = [r for r in records.values() if r["system"] == "base_longer"]
    assert record["stopping"]["updates"] == 8
    assert record["stopping"]["continued_from"]["step"] == 4
    assert [s["ended"] for s in record["training"]["train_segments"]] == [True, True]
    table = (experiment / "capped" / "results" / "smoke" / "long.md").read_text()
    assert "continued the run capped at 4" in table
    # the capped run is untouched: it still has its own result and 4 updates
    assert json.loads((_run_dir(experiment, "runs/capped", "base") / "result.json").read_text())["train_steps"] == 4


def test_only_a_run_that_differs_in_its_cap_alone_is_continued(experiment):
    spec = load_experiment(experiment / "capped")
    runs = experiment / "runs" / "capped"
    assert capped_predecessor(spec.cell("base_longer", "de_en", "smoke"), runs) == _run_dir(
        experiment, "runs/capped", "base")
    assert capped_predecessor(spec.cell("other_lr_longer", "de_en", "smoke"), runs) is None
    # the cosine schedule's cycle is the cap: 4 updates of the 8-update schedule are not the 4-update run
    assert capped_predecessor(spec.cell("base_longer_cosine", "de_en", "smoke"), runs) is None
    # the run capped at 4 validated at update 4, where the run validating every 3 updates would not have
    assert capped_predecessor(spec.cell("every3_longer", "de_en", "smoke"), runs) is None
    # another seed is another run
    assert capped_predecessor(spec.cell("base_longer", "de_en", "smoke", seed=2), runs) is None
    # the capped run itself (same cap) and a lower-capped cell have nothing to continue
    assert capped_predecessor(spec.cell("base", "de_en", "smoke"), runs) is None


def test_an_unfinished_capped_run_is_not_continued(experiment, tmp_path):
    """A capped run still training (no result.json) may be written to meanwhile: it is not copied."""
    import shutil

    runs = tmp_path / "runs"
    source = _run_dir(experiment, "runs/capped", "base")
    target = runs / "smoke" / source.parent.name / source.name
    shutil.copytree(source, target)
    spec = load_experiment(experiment / "capped")
    assert capped_predecessor(spec.cell("base_longer", "de_en", "smoke"), runs) == target
    (target / "result.json").unlink()
    assert capped_predecessor(spec.cell("base_longer", "de_en", "smoke"), runs) is None


def test_a_copy_killed_halfway_leaves_no_checkpoints_without_their_log(experiment, tmp_path, monkeypatch):
    """The copy is assembled beside the run directory: a failure mid-copy leaves the directory as it was (the next
    command continues again), and that next copy clears what the failed one left."""
    import mma_nmt.experiments.runner as runner

    source = _run_dir(experiment, "runs/capped", "base")
    run_dir = tmp_path / "base_longer-x"
    run_dir.mkdir()
    (run_dir / "cell.json").write_text("{}")
    real_copy = runner.shutil.copy2

    def copy_until_best(src, dst):
        if Path(src).name == "best.pt":
            raise OSError("killed")
        return real_copy(src, dst)

    monkeypatch.setattr(runner.shutil, "copy2", copy_until_best)
    with pytest.raises(OSError, match="killed"):
        continue_from(source, run_dir)
    assert not holds_run(run_dir) and sorted(p.name for p in run_dir.iterdir()) == ["cell.json"]
    monkeypatch.setattr(runner.shutil, "copy2", real_copy)
    event = continue_from(source, run_dir)
    assert event["step"] == 4 and holds_run(run_dir) and (run_dir / "cell.json").read_text() == "{}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["base_longer-x"]  # no staging directory left
    with pytest.raises(FileExistsError, match="already holds a run"):
        continue_from(source, run_dir)


def test_analyses_of_converged_models_read_the_convergence_tables_runs(experiment, monkeypatch):
    """``analysis.py --converged`` analyses system X's copy in the convergence table (X_to_patience, the run trained
    on) and writes beside the other analyses, under analysis/converged; without the flag, X of the named table."""
    from mma_nmt.experiments.analysis_cli import analysis_parser, command_line, output_dir, trained_seeds

    monkeypatch.chdir(experiment)
    paper = str(experiment / "capped")
    run_experiment(paper, scale="smoke", runs_dir="runs/capped", tables=["convergence"])
    parser = analysis_parser("An analysis.", dataset="de_en")
    for flags, updates, folder in (([], 4, "analysis"), (["--converged"], 6, "analysis/converged")):
        args = parser.parse_args(["--scale", "smoke", "--runs-dir", "runs/capped", *flags])
        (trained,), missing = trained_seeds(paper, "short", "base", args)
        assert not missing and trained.record["stopping"]["updates"] == updates
        assert trained.cell.system.name == "base" + ("_to_patience" if flags else "")
        assert output_dir(args, Path(paper) / "analysis.py") == Path(paper).resolve() / "results" / "smoke" / folder
        assert command_line(Path(paper) / "analysis.py", args).endswith("--scale smoke" + " --converged" * bool(flags))


def test_an_analysis_written_elsewhere_names_where_in_its_command():
    """``--output-dir`` keeps a second analysis of the same table (another machine's seeds, say) beside the first,
    and the report's command line says so, so that rerunning it rewrites that report and not the other."""
    from mma_nmt.experiments.analysis_cli import analysis_parser, command_line, output_dir

    parser = analysis_parser("An analysis.", dataset="de_en")
    args = parser.parse_args(["--scale", "mini", "--output-dir", "results/mini/analysis/seed3"])
    assert output_dir(args, "experiments/lstm_multihead/analysis.py") == Path("results/mini/analysis/seed3")
    assert command_line("experiments/lstm_multihead/analysis.py", args) == (
        "python experiments/lstm_multihead/analysis.py --scale mini --output-dir results/mini/analysis/seed3")


def test_an_analysis_names_the_data_its_models_trained_on_not_the_papers_corpus():
    """A report's heading says "Multi30k En-De (for IWSLT'15 En-Vi)", not the column key "en_vi" that reads as the
    paper's corpus; an unknown column is refused with the columns there are."""
    from mma_nmt.experiments.analysis_cli import analysis_parser, data_of

    parser = analysis_parser("An analysis.", dataset="en_vi")
    assert data_of("lstm_multihead", parser.parse_args(["--scale", "mini"])) == "Multi30k En-De (for IWSLT'15 En-Vi)"
    assert data_of("multihop", parser.parse_args(["--scale", "mini", "--dataset", "iwslt_de_en"])).startswith(
        "Multi30k De-En (for IWSLT")
    assert data_of("mma", parser.parse_args(["--scale", "full", "--dataset", "de_en"])) == "IWSLT14 De-En"
    with pytest.raises(ValueError, match="no dataset 'en_vi'.*de_en"):
        data_of("mma", parser.parse_args(["--scale", "mini"]))
