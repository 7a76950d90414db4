"""Experiment files: validation errors name the problem; cells resolve to run configs (and their models build for\nevery paper); run identity."""

from __future__ import annotations

import copy
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

from mma_nmt.experiments.runner import extends
from mma_nmt.experiments.spec import ExperimentError, load_experiment, run_identity
from mma_nmt.models import build_model

REPO = Path(__file__).resolve().parents[3]
BASE = """
[data]
corpus = "multi30k_de_en"
out_dir = "runs/data/x"
[model]
preset = "transformer_tiny"
[train]
max_steps = 2
threads = 1
"""


def write_experiment(tmp_path: Path, body: str) -> Path:
    (tmp_path / "base.toml").write_text(BASE)
    path = tmp_path / "experiment.toml"
    path.write_text(textwrap.dedent(body))
    return path


GOOD = """
name = "toy"
[datasets.de_en]
mini = { base = "base.toml", set = { "train.max_steps" = 3 }, label = "Multi30k De-En (for X)" }
smoke = { base = "base.toml", label = "Multi30k De-En, smoke" }
[systems.baseline]
label = "Base"
[systems.mma]
set = { "model.encoder.attention" = "mma" }
scale_set = { smoke = { "model.encoder.window" = 2 } }
[systems.also_baseline]
[tables.t]
title = "T"
columns = ["de_en"]
rows = ["baseline", "mma"]
baseline = "baseline"
paper = { baseline = { de_en = 30.0 }, mma = { de_en = 31.0 } }
"""


def test_cells_apply_dataset_system_and_scale_settings(tmp_path):
    experiment = load_experiment(write_experiment(tmp_path, GOOD))
    mini = {c.system.name: c for c in experiment.cells("t", "mini")}
    smoke = {c.system.name: c for c in experiment.cells("t", "smoke")}
    assert mini["baseline"].config["train"]["max_steps"] == 3
    assert smoke["baseline"].config["train"]["max_steps"] == 2
    assert mini["mma"].config["model"]["encoder"] == {"attention": "mma"}
    assert smoke["mma"].config["model"]["encoder"] == {"attention": "mma", "window": 2}
    assert "save_dir" not in mini["mma"].config["train"]


def test_identity_is_shared_by_equal_configs_and_ignores_execution_settings(tmp_path):
    experiment = load_experiment(write_experiment(tmp_path, GOOD))
    base = experiment.cell("baseline", "de_en", "mini")
    assert experiment.cell("also_baseline", "de_en", "mini").identity == base.identity
    assert experiment.cell("mma", "de_en", "mini").identity != base.identity
    assert experiment.cell("baseline", "de_en", "smoke").identity != base.identity
    moved = copy.deepcopy(base.config)
    moved["train"]["threads"] = 2
    moved["train"]["progress"] = False
    assert run_identity(moved, base.average_last) == base.identity
    moved["train"]["seed"] = 7
    assert run_identity(moved, base.average_last) != base.identity


def test_scale_without_recipe_is_left_out_and_unknown_scale_or_table_raise(tmp_path):
    experiment = load_experiment(write_experiment(tmp_path, GOOD))
    with pytest.raises(ExperimentError, match="no table 'nope'"):
        experiment.cells("nope", "mini")
    with pytest.raises(ExperimentError, match="unknown scale 'huge'"):
        experiment.cell("baseline", "de_en", "huge")
    assert experiment.cells("t", "full") == []


@pytest.mark.parametrize("change, message", [
    (('rows = ["baseline", "mma"]', 'rows = ["baseline", "missing"]'), "row 'missing' is not a system"),
    (('columns = ["de_en"]', 'columns = ["fr_en"]'), "column 'fr_en' is not a dataset"),
    (('baseline = "baseline"\n', 'baseline = "also_baseline"\n'), "baseline 'also_baseline' must be one of"),
    (('mma = { de_en = 31.0 }', 'mma = { xx = 31.0 }'), "paper numbers for 'mma'"),
    (('title = "T"', 'title = "T"\nmetric = "meteor"'), "metric 'meteor'"),
    (('title = "T"', 'title = "T"\ncolour = 1'), "unknown key"),
    (('base = "base.toml", set', 'base = "missing.toml", set'), "missing.toml does not exist"),
    (('[systems.also_baseline]', '[systems.also_baseline]\nsett = 1'), "systems.also_baseline: unknown key"),
    (('"model.encoder.attention" = "mma" }', '"model.encoder.atention" = "mma" }'), "unknown key"),
])
def test_malformed_experiment_files_name_the_problem(tmp_path, change, message):
    old, new = change
    assert old in GOOD
    with pytest.raises(ExperimentError, match=message):
        experiment = load_experiment(write_experiment(tmp_path, GOOD.replace(old, new, 1)))
        experiment.cells("t", "mini")


@pytest.mark.parametrize("change, key", [
    (("[tables.t]", "[tabels.t]"), r"\['tabels'\] in the top level"),
    (('name = "toy"', 'name = "toy"\ntitel = "Toy"'), r"\['titel'\] in the top level"),
    (("[datasets.de_en]", "[datasets.de_en]\nlable = 'De-En'"), r"\['lable'\] in datasets.de_en;"),
    (("[datasets.de_en]", "[datasets.de_en]\nmidi = { base = 'base.toml' }"), r"\['midi'\] in datasets.de_en;"),
    (('smoke = { base = "base.toml",', 'smoke = { base = "base.toml", average = 2,'),
     r"\['average'\] in datasets.de_en.smoke;"),
])
def test_unknown_keys_at_any_level_name_the_file_and_the_key_path(tmp_path, change, key):
    """Issue 50, case 9: ``[tabels.main]`` used to load as an experiment without that table, with exit 0."""
    old, new = change
    assert old in GOOD
    path = write_experiment(tmp_path, GOOD.replace(old, new, 1))
    with pytest.raises(ExperimentError, match=f"^{path}: unknown key\\(s\\) {key}"):
        load_experiment(path)


@pytest.mark.parametrize("text", [BASE, "", 'name = "toy"\n'])
def test_a_file_without_experiment_content_is_refused(tmp_path, text, capsys):
    """Issue 50, case 9: a run config (or an empty file) used to load as an experiment with no tables."""
    from mma_nmt.cli.main import main as cli

    path = tmp_path / "not_an_experiment.toml"
    path.write_text(text)
    with pytest.raises(ExperimentError, match=f"^{path}: unknown key|^{path} is not an experiment"):
        load_experiment(path)
    assert cli(["experiment", str(path), "--from-records"]) == 2
    assert str(path) in capsys.readouterr().err


PAPERS = sorted(p.parent.name for p in (REPO / "experiments").glob("*/experiment.toml"))


def test_the_five_papers_are_there():
    assert {"mma", "gmm", "lstm_multihead", "mlmha", "multihop"} <= set(PAPERS)


@pytest.mark.parametrize("paper", PAPERS)
def test_every_cell_resolves_and_small_models_build(paper):
    """Every table cell resolves at every scale its table runs at; each distinct mini/smoke model also builds (small
    vocabularies), so a size that does not divide into the heads or a layer index beyond the model fails here rather
    than after data preparation."""
    experiment = load_experiment(REPO / "experiments" / paper)
    built = set()
    for name, table in experiment.tables.items():
        for row, values in table.paper.items():
            assert all(isinstance(v, (int, float)) for v in values.values()), (name, row)
        for scale in table.scales:
            cells = experiment.cells(name, scale)
            assert cells or scale != "smoke", f"{paper}.{name}: nothing runs at smoke scale"
            assert scale != "full" or len(cells) == len(table.rows) * len(table.columns), (name, scale)
            for cell in cells:
                run = cell.run_config
                if scale == "full" or cell.identity in built:
                    continue
                built.add(cell.identity)
                build_model(replace(run.model, src_vocab_size=41, tgt_vocab_size=41))


CONVERGENCE_TABLES = [(paper, name) for paper in PAPERS
                      for name in load_experiment(REPO / "experiments" / paper).tables if name == "convergence"]


def test_every_paper_with_a_main_table_has_a_convergence_check():
    assert {paper for paper, _ in CONVERGENCE_TABLES} == {"mma", "gmm", "lstm_multihead", "mlmha", "multihop"}


@pytest.mark.parametrize("paper,table", CONVERGENCE_TABLES)
def test_each_run_to_patience_is_its_capped_row_trained_on(paper, table):
    """A convergence table compares X_to_patience with X: the same run, only with a higher cap (so the capped run is
    its prefix and can be continued). A setting changed in X but not in its copy would compare two different systems
    without a word."""
    experiment = load_experiment(REPO / "experiments" / paper)
    rows = experiment.tables[table].rows
    longer = [row for row in rows if row.endswith("_to_patience")]
    assert longer and all(row.removesuffix("_to_patience") in rows for row in longer), rows
    for scale in experiment.tables[table].scales:
        cells = {(c.system.name, c.dataset.role, c.seed): c for c in experiment.cells(table, scale)}
        for (system, role, seed), cell in cells.items():
            if system in longer:
                capped = cells[(system.removesuffix("_to_patience"), role, seed)]
                assert extends(cell.config, capped.config), (system, role, seed)
                assert cell.average_last == capped.average_last


def test_runs_that_share_a_prepared_directory_must_prepare_it_alike(tmp_path):
    from mma_nmt.experiments.runner import check_prepared_dirs

    body = GOOD.replace('[systems.also_baseline]', '[systems.also_baseline]\nset = { "data.vocab_size" = 500 }')
    experiment = load_experiment(write_experiment(tmp_path, body))
    cells = [experiment.cell(name, "de_en", "mini") for name in ("baseline", "mma")]
    check_prepared_dirs(cells)
    with pytest.raises(ExperimentError, match="prepare runs/data/x with different"):
        check_prepared_dirs(cells + [experiment.cell("also_baseline", "de_en", "mini")])


def test_a_scale_below_full_must_name_its_data(tmp_path):
    """Our mini numbers never sit under the paper's corpus name: the recipe must say what it runs on."""
    body = GOOD.replace(', label = "Multi30k De-En (for X)"', "")
    with pytest.raises(ExperimentError, match="datasets.de_en.mini needs a label"):
        load_experiment(write_experiment(tmp_path, body))
    experiment = load_experiment(write_experiment(tmp_path, GOOD))
    assert experiment.datasets["de_en"].data_label("mini") == "Multi30k De-En (for X)"


def test_seeds_expand_the_seeded_rows_and_share_the_recipe_seed_run(tmp_path):
    body = GOOD.replace('baseline = "baseline"\n', 'baseline = "baseline"\nseeds = { mini = [1, 2, 3] }\n'
                        'seed_rows = ["mma"]\n', 1)
    experiment = load_experiment(write_experiment(tmp_path, body))
    cells = experiment.cells("t", "mini")
    assert [(c.system.name, c.seed) for c in cells] == [("baseline", 1), ("mma", 1), ("mma", 2), ("mma", 3)]
    assert len({c.identity for c in cells}) == 4
    # seed 1 is the recipe's own seed (train.seed is 1 by default in the base): the same run as without seeds
    unseeded = load_experiment(write_experiment(tmp_path, GOOD)).cell("mma", "de_en", "mini")
    assert [c for c in cells if c.system.name == "mma"][0].config["train"]["seed"] == 1
    assert unseeded.config["train"].get("seed", 1) == 1
    assert experiment.cells("t", "smoke")[0].seed == 1  # no seeds at smoke: the recipe's own
    with pytest.raises(ExperimentError, match="seeds.mini"):
        load_experiment(write_experiment(tmp_path, GOOD.replace('baseline = "baseline"\n',
                                                                'baseline = "baseline"\nseeds = { mini = [1, 1] }\n', 1)))


def test_a_system_can_average_more_checkpoints_but_must_keep_them(tmp_path):
    """``average_last = { scale = N }`` on a system replaces the dataset recipe's at that scale; a cell that would
    average more checkpoints than it keeps fails when the experiment is read, not after training."""
    body = GOOD.replace('[systems.also_baseline]', '[systems.also_baseline]\naverage_last = { mini = 4 }\n'
                        'set = { "train.keep_periodic" = 4 }')
    experiment = load_experiment(write_experiment(tmp_path, body))
    assert experiment.cell("also_baseline", "de_en", "mini").average_last == 4
    assert experiment.cell("also_baseline", "de_en", "smoke").average_last == 0
    assert experiment.cell("baseline", "de_en", "mini").average_last == 0
    too_few = GOOD.replace('[systems.also_baseline]', '[systems.also_baseline]\naverage_last = { mini = 4 }')
    with pytest.raises(ExperimentError, match="average_last = 4 needs train.keep_periodic >= 4, got 2"):
        load_experiment(write_experiment(tmp_path, too_few)).cell("also_baseline", "de_en", "mini")
    with pytest.raises(ExperimentError, match="unknown key"):
        load_experiment(write_experiment(tmp_path, GOOD.replace(
            '[systems.also_baseline]', '[systems.also_baseline]\naverage_last = { huge = 4 }')))


def test_gmm_full_recipes_follow_vaswanis_learning_rate_and_averaging():
    """Vaswani et al.: lrate peaks at d_model^-0.5 * warmup^-0.5 (6.99e-4 for the base, 4.94e-4 for the big model);
    the big models train 300K steps and average the last 20 checkpoints, the base 100K and the last 5."""
    experiment = load_experiment(REPO / "experiments" / "gmm")
    for table, steps, averaged in (("main", 100000, 5), ("big", 300000, 20)):
        for cell in experiment.cells(table, "full"):
            run = cell.run_config
            peak = run.model.d_model ** -0.5 * run.train.optim.warmup_steps ** -0.5
            assert run.train.optim.lr == pytest.approx(peak, rel=2e-3), (table, cell.key)
            assert (run.train.max_steps, cell.average_last, run.train.optim.eps) == (steps, averaged, 1e-9)


def test_mma_iwslt14_full_recipe_scores_its_tokenised_references_as_they_are(shared_data):
    """The IWSLT14 references are Moses-tokenised with &apos; escapes: 13a splits them (so 13a BLEU is not the
    tokenised BLEU fairseq reports); the recipe scores with tokenize="none", which leaves every line as it is."""
    from sacrebleu.metrics import BLEU

    from mma_nmt.data.fileio import read_text_lines
    from mma_nmt.experiments.command import experiment_named

    experiment = experiment_named("mma")
    run = experiment.cell("baseline", "de_en", "full").run_config
    assert run.eval.bleu_tokenize == "none"
    references = read_text_lines(shared_data / "iwslt14_de_en" / "test.en.gz")
    recipe, default = BLEU(tokenize=run.eval.bleu_tokenize).tokenizer, BLEU().tokenizer
    assert sum(default(line) != line for line in references if "&apos;" in line) > 2000
    assert all(recipe(line) == line for line in references)
