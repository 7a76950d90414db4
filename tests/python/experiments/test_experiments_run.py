"""Running tables end to end at the smoke scale on real Multi30k data: reports built from run records, skipping
finished runs, resuming, seeds, failures that lose nothing, and the significance column on constructed outputs."""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path

import pytest

from mma_nmt.experiments.command import experiment_named, run_experiment
from mma_nmt.experiments.records import late_descent, load_records, training_minutes, training_segments
from mma_nmt.experiments.report import where_trained, build_table, significance_mark, to_markdown
from mma_nmt.experiments.spec import ExperimentError, load_experiment

REPO = Path(__file__).resolve().parents[3]
SMOKE_BASE = REPO / "experiments" / "common" / "smoke_multi30k_de_en.toml"
PAPERS = sorted(p.parent.name for p in (REPO / "experiments").glob("*/experiment.toml"))

TOY = f"""
name = "toy"
title = "A toy paper"
[datasets.de_en]
label = "De-En"
smoke = {{ base = "{SMOKE_BASE}", label = "Multi30k De-En, smoke subset" }}
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
    shutil.rmtree(folder / "results", ignore_errors=True)  # each test starts without records or tables
    (folder / "experiment.toml").write_text(textwrap.dedent(TOY))
    return folder


def run_dir_of(toy: Path, workdir: Path, system: str) -> Path:
    """The run directory of ``system``'s run as the toy experiment defines it now (other tests train other seeds)."""
    identity = load_experiment(toy).cell(system, "de_en", "smoke").identity
    (found,) = (workdir / "runs" / "experiments" / "smoke").glob(f"*/*-{identity}")
    return found


def test_an_experiment_is_found_by_its_folder_name_or_path_and_an_unknown_name_lists_the_known(toy):
    assert experiment_named("mma").name == "mma"
    assert experiment_named(str(toy)).path == load_experiment(toy).path
    with pytest.raises(ExperimentError, match=r"no experiment 'nmt'; known: .*gmm.*mma"):
        experiment_named("nmt")


def test_table_is_written_and_finished_runs_are_skipped(toy, workdir, capsys):
    (md,) = run_experiment(str(toy), scale="smoke", runs_dir="runs/experiments", command="toy command")
    data = json.loads(md.with_suffix(".json").read_text())
    assert [row["system"] for row in data["rows"]] == ["baseline", "mma"]
    mma = data["rows"][1]["cells"]["de_en"]
    base = data["rows"][0]["cells"]["de_en"]
    assert mma["delta"] == pytest.approx(mma["bleu"] - base["bleu"])
    assert 0.0 <= mma["p_value"] <= 1.0 and mma["paper_delta"] == 1.5
    assert "delta" not in base and base["paper"] == 30.0
    assert len(data["runs"]) == 2 and all(run["training"]["parameters"] > 0 for run in data["runs"])
    text = md.read_text()
    assert "| MMA |" in text and "Command: `toy command`" in text and "31.50" in text
    assert "ours: Multi30k De-En, smoke subset" in text and "paper: De-En" in text  # our data is named as ours
    capsys.readouterr()
    run_experiment(str(toy), scale="smoke", runs_dir="runs/experiments")
    assert "wrote" in capsys.readouterr().out and len(load_records(toy / "results" / "smoke" / "runs")) == 2


def test_every_finished_run_leaves_a_record_with_its_stopping_point_and_hypotheses(toy, workdir):
    run_experiment(str(toy), scale="smoke", runs_dir="runs/experiments")
    records = load_records(toy / "results" / "smoke" / "runs")
    assert len(records) == 2
    for identity, record in records.items():
        assert record["identity"] == identity and record["seed"] == 1
        assert record["data"] == "Multi30k De-En, smoke subset" and record["corpus"] == "multi30k_de_en"
        assert record["config"]["train"]["max_steps"] == 4
        assert record["stopping"]["updates"] == 4 and record["stopping"]["reason"] == "max_steps"
        assert record["stopping"]["checkpoint"] in ("best.pt", "last.pt")
        assert [point["step"] for point in record["curve"]] == [4]  # the smoke recipe validates once, at the end
        assert record["hardware"]["device"] == "cpu" and record["hardware"]["cpu_cores"] >= 1
        assert record["software"]["torch"]
        lines = Path(record["hypotheses"]).read_text(encoding="utf-8").split("\n")[:-1]
        assert len(lines) == record["metrics"]["sentences"] == 1000


def test_tables_rebuild_from_records_alone(toy, workdir, tmp_path, monkeypatch):
    """A new machine regenerates a table from the committed records: no run directory, no training, no prepared
    data (the bootstrap's test references: the corpus is prepared for them instead of failing)."""
    (md,) = run_experiment(str(toy), scale="smoke", runs_dir="runs/experiments", command="c")
    before = json.loads(md.with_suffix(".json").read_text())
    fresh = tmp_path / "clone"
    shutil.copytree(toy, fresh / "toy")
    monkeypatch.chdir(fresh)
    import mma_nmt.experiments.command as command

    monkeypatch.setattr(command, "run_cells", lambda *a, **k: pytest.fail("trained while rebuilding from records"))
    (again,) = run_experiment("toy", scale="smoke", runs_dir="runs/experiments", command="c", from_records=True)
    after = json.loads(again.with_suffix(".json").read_text())
    assert [r["cells"] for r in after["rows"]] == [r["cells"] for r in before["rows"]]
    assert any(cell.get("per_seed") for r in after["rows"] for cell in r["cells"].values())  # the bootstrap ran
    # the JSON names each run's translations relative to its own folder, not where the table was written
    assert [r["hypotheses"] for r in after["runs"]] == [r["hypotheses"] for r in before["runs"]]
    assert all((again.parent / r["hypotheses"]).is_file() for r in after["runs"])
    assert list((fresh / "runs" / "data").glob("*/meta.json")), "the references' corpus was not prepared"


def test_finished_runs_are_recorded_without_training(toy, workdir, monkeypatch):
    """Runs that finished while their table's command was interrupted (or still trains others) get their records from
    ``--from-records``, which trains nothing."""
    run_experiment(str(toy), scale="smoke", runs_dir="runs/experiments")
    shutil.rmtree(toy / "results")
    import mma_nmt.experiments.command as command

    monkeypatch.setattr(command, "run_cells", lambda *a, **k: pytest.fail("trained while collecting records"))
    (md,) = run_experiment(str(toy), scale="smoke", runs_dir="runs/experiments", from_records=True)
    assert len(load_records(toy / "results" / "smoke" / "runs")) == 2
    rows = json.loads(md.with_suffix(".json").read_text())["rows"]
    assert all(row["cells"]["de_en"]["bleu"] is not None for row in rows)


def test_system_filter_trains_only_the_rows_named(toy, workdir, monkeypatch):
    """``--system baseline`` trains the baseline alone; the table is written with the other row empty, and a name
    that is no row of the table is refused before anything trains."""
    from mma_nmt.experiments.spec import ExperimentError

    trained = []
    import mma_nmt.experiments.command as command

    real = command.run_cells
    monkeypatch.setattr(command, "run_cells",
                        lambda experiment, cells, *a, **k: trained.extend(c.system.name for c in cells)
                        or real(experiment, cells, *a, **k))
    (md,) = run_experiment(str(toy), scale="smoke", runs_dir="runs/system_filter", systems=["baseline"])
    assert trained == ["baseline"]  # a runs directory of its own: no run finished there by another test
    rows = {row["system"]: row["cells"]["de_en"] for row in json.loads(md.with_suffix(".json").read_text())["rows"]}
    assert rows["baseline"]["bleu"] is not None and rows["mma"]["bleu"] is None
    with pytest.raises(ExperimentError, match=r"no system \['mmma'\].*systems there: baseline, mma"):
        run_experiment(str(toy), scale="smoke", runs_dir="runs/system_filter", systems=["mmma"])
    with pytest.raises(ExperimentError, match=r"no dataset \['de_fr'\]"):
        run_experiment(str(toy), scale="smoke", runs_dir="runs/system_filter", datasets=["de_fr"])
    assert trained == ["baseline"]


def test_seed_filter_trains_only_the_seeds_named(toy, workdir, monkeypatch):
    """``--seed 2`` trains seed 2 of every row and no other seed (one seed's pair on one machine, the next seed's on
    another); a seed the table does not run is refused before anything trains."""
    from mma_nmt.experiments.spec import ExperimentError

    text = (toy / "experiment.toml").read_text()
    (toy / "experiment.toml").write_text(text.replace('baseline = "baseline"\n', 'baseline = "baseline"\n'
                                                      'seeds = { smoke = [1, 2] }\n'))
    trained = []
    import mma_nmt.experiments.command as command

    real = command.run_cells
    monkeypatch.setattr(command, "run_cells",
                        lambda experiment, cells, *a, **k: trained.extend((c.system.name, c.seed) for c in cells)
                        or real(experiment, cells, *a, **k))
    with pytest.raises(ExperimentError, match=r"no seed \[5\].*seeds there: 1, 2"):
        run_experiment(str(toy), scale="smoke", runs_dir="runs/seed_filter", seeds=[5])
    assert trained == []
    (md,) = run_experiment(str(toy), scale="smoke", runs_dir="runs/seed_filter", seeds=[2])
    assert sorted(trained) == [("baseline", 2), ("mma", 2)]
    runs = json.loads(md.with_suffix(".json").read_text())["runs"]
    assert sorted((run["row"], run["seed"]) for run in runs) == [("baseline", 2), ("mma", 2)]


def test_seeds_give_mean_std_and_per_seed_significance(toy, workdir):
    text = (toy / "experiment.toml").read_text()
    (toy / "experiment.toml").write_text(text.replace('baseline = "baseline"\n', 'baseline = "baseline"\n'
                                                      'seeds = { smoke = [1, 2] }\n'))
    (md,) = run_experiment(str(toy), scale="smoke", runs_dir="runs/experiments")
    data = json.loads(md.with_suffix(".json").read_text())
    assert sorted((run["row"], run["seed"]) for run in data["runs"]) == [("baseline", 1), ("baseline", 2),
                                                                          ("mma", 1), ("mma", 2)]
    mma = data["rows"][1]["cells"]["de_en"]
    assert mma["seeds"] == [1, 2] and mma["n"] == 2
    assert mma["bleu"] == pytest.approx(sum(mma["bleus"]) / 2)
    assert [c["seed"] for c in mma["per_seed"]] == [1, 2]
    base = {run["seed"]: run["metrics"]["bleu"] for run in data["runs"] if run["row"] == "baseline"}
    for seed_cell, bleu in zip(mma["per_seed"], mma["bleus"]):
        assert seed_cell["delta"] == pytest.approx(bleu - base[seed_cell["seed"]])  # paired with its own seed
    assert mma["holds"] == (all(c["significant"] for c in mma["per_seed"])
                            and len({c["delta"] > 0 for c in mma["per_seed"]}) == 1)
    assert "across 2 seeds" in md.read_text()


def test_runs_go_seed_by_seed_with_the_compared_rows_first(toy, workdir, monkeypatch):
    text = (toy / "experiment.toml").read_text()
    text = text.replace('[tables.t]', '[systems.local]\nlabel = "Local"\nset = { "model.encoder.attention" = "mma", '
                        '"model.encoder.head_spec" = "L" }\n[tables.t]')
    text = text.replace('rows = ["baseline", "mma"]', 'rows = ["baseline", "local", "mma"]')
    text = text.replace('baseline = "baseline"\n', 'baseline = "baseline"\nseeds = { smoke = [1, 2] }\n'
                        'seed_rows = ["baseline", "mma"]\n')
    (toy / "experiment.toml").write_text(text)
    import mma_nmt.experiments.command as command

    submitted = []

    def record_order(experiment, cells, *args, **kwargs):
        submitted.extend((cell.system.name, cell.seed) for cell in cells)
        return {}, []  # nothing trained, nothing failed

    monkeypatch.setattr(command, "run_cells", record_order)
    run_experiment(str(toy), scale="smoke", runs_dir="runs/nowhere")
    assert submitted == [("baseline", 1), ("mma", 1), ("local", 1), ("baseline", 2), ("mma", 2)]


def test_interrupted_run_resumes_from_its_last_checkpoint(toy, workdir):
    run_experiment(str(toy), scale="smoke", runs_dir="runs/experiments")
    run_dir = run_dir_of(toy, workdir, "mma")
    before = json.loads((run_dir / "result.json").read_text())
    (run_dir / "result.json").unlink()  # as if killed after training, before scoring (so no record was written)
    shutil.rmtree(toy / "results")
    run_experiment(str(toy), scale="smoke", runs_dir="runs/experiments")
    after = json.loads((run_dir / "result.json").read_text())
    events = [json.loads(line)["event"] for line in (run_dir / "log.jsonl").read_text().splitlines()]
    assert "resume" in events and after["resumed"] >= 1
    assert [segment["ended"] for segment in after["train_segments"]] == [True, True]
    assert [segment["hardware"]["device"] for segment in after["train_segments"]] == ["cpu", "cpu"]
    assert after["train_steps"] == before["train_steps"] == 4
    assert after["bleu"] == before["bleu"]
    assert (run_dir / "translations" / "test.hyp.txt").read_text() == Path(before["hypotheses"]).read_text()


def test_training_minutes_count_every_segment_of_a_resumed_run():
    """A killed segment writes no ``end`` event; its time still counts, to its last logged event."""
    minute = 60.0
    events = [{"event": "start", "time": 0.0, "step": 0}, {"event": "train", "time": 10 * minute, "step": 50},
              {"event": "checkpoint", "time": 12 * minute, "step": 200},  # killed here
              {"event": "resume", "time": 100 * minute, "step": 200}, {"event": "start", "time": 100 * minute, "step": 200},
              {"event": "train", "time": 103 * minute, "step": 250},
              {"event": "end", "time": 105 * minute, "step": 400, "minutes": 5.0}]
    assert training_minutes(training_segments(events)) == pytest.approx(12.0 + 5.0)
    assert training_segments(events) == [{"from_update": 0, "to_update": 200, "minutes": 12.0, "ended": False},
                                         {"from_update": 200, "to_update": 400, "minutes": 5.0, "ended": True}]
    assert training_minutes(training_segments(events[:3])) == pytest.approx(12.0)  # a run still open counts to its last event
    assert training_minutes(training_segments([])) == 0.0


def test_a_run_trained_on_two_machines_names_both_with_the_update_where_the_second_took_over():
    """Begun on a lent GPU, killed there after its checkpoint at 200 (its last logged update 230 is redone), resumed
    and translated on a CPU: the segments keep the hardware their ``start`` events logged, and the table's hardware
    column names both machines in order."""
    gpu = {"cpu": "AMD EPYC", "torch_threads": 1, "device": "cuda", "gpu": "NVIDIA H200"}
    cpu = {"cpu": "Intel Xeon", "torch_threads": 1, "device": "cpu"}
    events = [{"event": "start", "time": 0.0, "step": 0, "hardware": gpu},
              {"event": "checkpoint", "time": 60.0, "step": 200}, {"event": "train", "time": 70.0, "step": 230},
              {"event": "resume", "time": 500.0, "step": 200}, {"event": "start", "time": 500.0, "step": 200,
                                                                 "hardware": cpu},
              {"event": "end", "time": 800.0, "step": 400}]
    segments = training_segments(events)
    assert [(s["from_update"], s["to_update"], s["hardware"]["device"]) for s in segments] == [(0, 230, "cuda"),
                                                                                            (200, 400, "cpu")]
    run = {"stopping": {}, "training": {"train_segments": segments}, "hardware": cpu}
    assert where_trained(run) == "NVIDIA H200 to update 200, then Intel Xeon, 1 thread(s)"
    # one machine throughout, or segments logged before their hardware was: the run's own hardware alone
    assert where_trained({"stopping": {}, "training": {"train_segments": segments[1:]}, "hardware": cpu}) == \
        "Intel Xeon, 1 thread(s)"
    assert where_trained({"stopping": {}, "training": {"train_segments": [{"from_update": 0, "to_update": 400}]},
                           "hardware": cpu}) == "Intel Xeon, 1 thread(s)"
    # a capped run continued on another machine
    continued = {"stopping": {"continued_from": {"step": 6000, "hardware": gpu}},
                 "training": {"train_segments": [{"from_update": 6000, "to_update": 9000, "hardware": cpu}]},
                 "hardware": cpu}
    assert where_trained(continued) == "NVIDIA H200 to update 6000, then Intel Xeon, 1 thread(s)"


def test_late_descent_is_the_fall_of_the_validation_nll_over_the_last_thousand_updates():
    curve = [{"step": s, "valid_nll": v} for s, v in [(200, 3.0), (4800, 1.70), (5000, 1.66), (5800, 1.65),
                                                      (6000, 1.64)]]
    assert late_descent(curve) == pytest.approx(1.64 - 1.66)  # from update 5000, the last at least 1,000 back
    assert late_descent(curve, window=200) == pytest.approx(1.64 - 1.65)
    assert late_descent(curve, window=300) == pytest.approx(1.64 - 1.66)  # 5800 is less than 300 back
    assert late_descent(curve[:1]) is None and late_descent([]) is None  # shorter than the window
    assert late_descent([{"step": 200, "valid_loss": 3.0}, {"step": 1400, "valid_loss": 2.0}]) is None  # no NLL


def test_a_failing_run_loses_nothing_else(toy, workdir):
    text = (toy / "experiment.toml").read_text()
    broken = text.replace('[systems.mma]', '[systems.broken]\nlabel = "Broken"\n'
                          'set = { "train.max_len" = 1 }\n[systems.mma]')  # valid config; training fails at start
    broken = broken.replace('rows = ["baseline", "mma"]', 'rows = ["baseline", "mma", "broken"]')
    (toy / "experiment.toml").write_text(broken)
    with pytest.raises(RuntimeError, match="broken on de_en"):
        run_experiment(str(toy), scale="smoke", runs_dir="runs/experiments")
    data = json.loads((toy / "results" / "smoke" / "t.json").read_text())
    assert [row["cells"]["de_en"]["bleu"] is None for row in data["rows"]] == [False, False, True]


def test_a_failed_rerun_never_erases_a_published_number(toy, workdir):
    """Issue 19, case 8: a table keeps every number it publishes when the run behind it fails."""
    (md,) = run_experiment(str(toy), scale="smoke", runs_dir="runs/experiments")
    published = md.read_text()
    text = (toy / "experiment.toml").read_text()
    # the MMA system's config changes (so its published run no longer matches) and the new run fails
    mma_set = '"model.encoder.attention" = "mma", "model.encoder.head_spec" = "GLFB"'
    (toy / "experiment.toml").write_text(text.replace(mma_set, '"train.max_len" = 1'))  # valid config; training fails
    with pytest.raises(RuntimeError, match="not rewritten: it publishes mma on de_en"):
        run_experiment(str(toy), scale="smoke", runs_dir="runs/experiments")
    assert md.read_text() == published


def test_significance_column_on_constructed_outputs(toy, workdir):
    """A system that outputs the references beats one that outputs a fixed word: significant at p < 0.01."""
    run_experiment(str(toy), scale="smoke", runs_dir="runs/experiments")
    experiment = load_experiment(toy)
    records = {}
    for record in load_records(toy / "results" / "smoke" / "runs").values():
        from mma_nmt.data import ParallelDataset
        refs = ParallelDataset.load(workdir / "runs" / "data" / "smoke_multi30k_de_en", "test").tgt_text
        name = record["system"]
        fake = workdir / f"{name}.fake.txt"
        fake.write_text("".join(line + "\n" for line in (refs if name == "mma" else ["a"] * len(refs))))
        records[record["identity"]] = {**record, "hypotheses": str(fake),
                                       "metrics": {**record["metrics"], "bleu": 100.0 if name == "mma" else 0.0}}
    data = build_table(experiment.plan(["t"], "smoke"), "t", records, bootstrap_samples=200)
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
    assert [r["metrics"]["bleu"] for r in one["runs"]] == [r["metrics"]["bleu"] for r in two["runs"]]
    assert [r["training"]["valid_nll"] for r in one["runs"]] == [r["training"]["valid_nll"] for r in two["runs"]]


def test_mma_analysis_draws_the_trained_heads_of_the_main_table(workdir, monkeypatch):
    """``experiments/mma/analysis.py`` loads the MMA and baseline models a table trained and writes its figures."""
    import subprocess
    import sys

    monkeypatch.chdir(workdir)
    run_experiment("mma", tables=["main"], scale="smoke", runs_dir="runs/experiments", results_dir="results/mma",
                   datasets=["de_en"])
    done = subprocess.run([sys.executable, str(REPO / "experiments" / "mma" / "analysis.py"), "--scale", "smoke",
                           "--results-dir", "results/mma", "--sentences", "12"], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    out = workdir / "results" / "mma" / "analysis"
    for name in ("mma_head_maps.png", "mma_distance_entropy.png", "baseline_distance_entropy.png"):
        assert (out / name).stat().st_size > 1000, name
    table = (out / "mma_heads.md").read_text()
    for part in ("| mma | 1 | ", "| L |", "| F |", "| B |", "| baseline | 1 |", "| mma | L |"):
        assert part in table, part
    assert "(smoke scale, Multi30k De-En, 2,000 training lines (smoke check))" in table.splitlines()[0]
    rows = json.loads((out / "mma_heads_rows.json").read_text())["rows"]
    assert {(row["system"], row["kind"]) for row in rows} == {("mma", kind) for kind in "GLFB"} | {("baseline", "G")}


def test_analyses_read_finished_runs_only(toy, workdir):
    """A run still training has checkpoints but no final model: the analyses must not pass it off as trained."""
    from mma_nmt.experiments.analysis_cli import trained_cell

    run_experiment(str(toy), scale="smoke", runs_dir="runs/experiments")
    finished = run_dir_of(toy, workdir, "mma")
    training = workdir / "runs" / "training" / "smoke" / finished.parent.name / finished.name
    shutil.rmtree(training.parent.parent, ignore_errors=True)
    shutil.copytree(finished, training)
    (training / "result.json").unlink()
    with pytest.raises(FileNotFoundError, match="has not finished"):
        trained_cell(str(toy), "mma", "de_en", scale="smoke", runs_dir="runs/training", results_dir="results/none")
    shutil.copy(finished / "result.json", training / "result.json")
    loaded = trained_cell(str(toy), "mma", "de_en", scale="smoke", runs_dir="runs/training",
                          results_dir="results/none")
    assert loaded.record is None and loaded.run_dir.resolve() == training
    recorded = trained_cell(str(toy), "mma", "de_en", scale="smoke", runs_dir="runs/experiments")
    assert recorded.record["system"] == "mma" and recorded.checkpoint.is_file()


ANALYSES = {  # paper: (table, dataset, extra arguments, files written, text the report must hold)
    "gmm": ("main", "en_de", ["--gold-sentences", "20"], ["gmm_components.png", "gmm_gates.png"],
            ["| baseline | 1 |", "| ours | 1 |", "20 Europarl sentence pairs", "| mixture |", "layer 1:"]),
    "lstm_multihead": ("heads", "en_vi", [], ["lstm_head_response.png"], ["| h1 | 1 |", "| h4 | 1 |"]),
    "mlmha": ("main", "en_de", [],
              ["baseline_distance_entropy.png", "m10_distance_entropy.png", "mlmha_layers_by_seed.png"],
              ["| baseline | 1 |", "| m10 | 1 |", "| 6 |", "mlmha_layers_by_seed.png"]),
    "multihop": ("main", "iwslt_de_en", [], ["multihop_head_gate_layer4.png"], ["| 1 |", "| 4 |", "log 4"]),
}


@pytest.mark.parametrize("paper", sorted(ANALYSES))
def test_paper_analysis_reads_the_trained_models_of_its_table(paper, workdir, monkeypatch):
    """``experiments/<paper>/analysis.py`` finds the models its table trained and writes its figures and report."""
    import subprocess
    import sys

    table, dataset, extra, figures, parts = ANALYSES[paper]
    monkeypatch.chdir(workdir)
    run_experiment(paper, tables=[table], scale="smoke", runs_dir="runs/experiments", results_dir=f"results/{paper}",
                   datasets=[dataset])
    done = subprocess.run([sys.executable, str(REPO / "experiments" / paper / "analysis.py"), "--scale", "smoke",
                           "--results-dir", f"results/{paper}", "--sentences", "12", *extra],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    out = workdir / "results" / paper / "analysis"
    for name in figures:
        assert (out / name).stat().st_size > 1000, name
    (report,) = [path for path in out.glob("*.md")]
    text = report.read_text()
    (rows_file,) = out.glob("*_rows.json")  # what a machine without these models keeps of them
    assert {row["seed"] for row in json.loads(rows_file.read_text())["rows"]} == {1}
    for part in parts:
        assert part in text, (part, text)
    heading = text.splitlines()[0]  # names the data trained on, never the paper corpus's column key
    assert "Multi30k" in heading and "2,000 training lines (smoke check)" in heading and dataset not in heading, heading


def test_software_names_the_commit_the_sender_gives(tmp_path, monkeypatch):
    """A tree copied to another machine (a GPU lent for a few minutes) may have no .git, or git metadata that is not the
    sender's: MMA_NMT_GIT_COMMIT, when set, names the commit; without it a checkout names its HEAD and a tree without
    git history says "unknown"."""
    from mma_nmt.experiments.records import code_commit, software

    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))  # git must not find a repository above tmp_path
    monkeypatch.delenv("MMA_NMT_GIT_COMMIT", raising=False)
    assert software(tmp_path)["git_commit"] == "unknown"
    head = software(REPO)["git_commit"]
    assert head != "unknown" and code_commit(REPO, mark_dirty=True).startswith(head)
    monkeypatch.setenv("MMA_NMT_GIT_COMMIT", "abc1234")
    assert software(tmp_path)["git_commit"] == software(REPO)["git_commit"] == "abc1234"
