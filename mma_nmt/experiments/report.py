"""A table's results laid out like the paper's, built from run records: our BLEU under the name of the data we ran on
(mean and standard deviation over seeds), the difference to the baseline of the same seed with paired-bootstrap
significance per seed, the paper's numbers beside ours under the paper's corpus name; then one line per run (seed,
stopping point, training time, other metrics, hardware). Written as Markdown, JSON and a learning-curve figure
(:mod:`~mma_nmt.experiments.curves`), but never with less than the table publishes today (:func:`write_table`; the
rule is ``mma-nmt experiment --help``'s). The scoring modules (sacreBLEU, the bootstrap, Moses) are imported where a
table is scored."""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from mma_nmt import pipeline
from mma_nmt.data import ParallelDataset
from mma_nmt.data.fileio import atomic_write_json, atomic_write_text, read_text_lines
from mma_nmt.experiments.curves import plot_learning_curves
from mma_nmt.experiments.records import CHECKSUM_KEY, late_descent
from mma_nmt.experiments.spec import Plan, PlannedRun
from mma_nmt.training.hardware import hardware_name

SIGNIFICANT = 0.05
CLAIM_RULE = ("A difference *holds across seeds* only when every seed's difference has the same sign and is "
              "significant (p < 0.05) against the baseline of that seed.")


def _git_commit(where: Path) -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=where, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


@dataclass
class TestReferences:
    """A column's test references: one line per sentence (``lines``), the target language (for tokenised BLEU), and
    every reference stream where the corpus has several references per sentence (NIST), else None."""

    lines: list[str]
    lang: str
    streams: list[list[str]] | None = None
    tokenized: dict = field(default_factory=dict, repr=False)  # Moses-tokenised text by content, computed once

    def moses(self, lines: list[str]) -> list[str]:
        from mma_nmt.evaluation.scoring import moses_tokenize

        key = hashlib.sha256("\n".join(lines).encode()).hexdigest()
        if key not in self.tokenized:
            self.tokenized[key] = moses_tokenize(lines, self.lang)
        return self.tokenized[key]


def _references(planned: PlannedRun) -> TestReferences:
    """The test references of ``planned``'s column, preparing its corpus first on a machine that has not (a table is
    rebuilt from its records without any training)."""
    from mma_nmt.evaluation.multi_reference import concatenated_streams, run_reference_sets

    run = planned.run_config
    pipeline.ensure_prepared(run, say=lambda text: print(f"[experiment] {text} (for its test references)", flush=True))
    data = ParallelDataset.load(run.prepared_dir(), run.eval.split)
    sets = run_reference_sets(run)
    return TestReferences(lines=data.tgt_text, lang=data.meta.get("corpus", {}).get("tgt_lang", "en"),
                          streams=concatenated_streams(sets) if sets else None)


def significance_mark(p_value: float | None) -> str:
    if p_value is None:
        return ""
    return "††" if p_value < 0.01 else "†" if p_value < SIGNIFICANT else " (n.s.)"


def score(record: dict, metric: str) -> float:
    """The table's number for a run: ``metric``, or for a corpus with several references per test set (NIST) the
    mean over its test sets of the multi-reference BLEU, as the paper reports it."""
    multi = record["metrics"].get("multi_reference")
    if metric == "bleu" and multi:
        return multi["bleu_test_set_mean"]
    return record["metrics"][metric]


def _spread(values: list[float]) -> dict:
    return {"mean": statistics.fmean(values) if values else None,
            "std": statistics.stdev(values) if len(values) > 1 else None, "n": len(values)}


def _translations(record: dict, references: list[str]) -> list[str]:
    """A record's test translations, refused (naming the file) unless they are line for line with ``references``."""
    lines = read_text_lines(record["hypotheses"])
    pipeline._same_count(lines, record["hypotheses"], references, f"the test split of {record['dataset']}")
    return lines


def _significance(ours: dict, base: dict, references: TestReferences, metric: str, samples: int) -> dict:
    """The paired bootstrap of ``ours`` against ``base`` on the table's metric: tokenised BLEU on Moses-tokenised text
    (``tokenize="none"``) for a table of tokenised BLEU; else sacreBLEU's BLEU with the run's tokenizer, against every
    reference where the column has several (NIST: the test sets pooled, all four references)."""
    from mma_nmt.evaluation.bootstrap import paired_bootstrap

    system, baseline = _translations(ours, references.lines), _translations(base, references.lines)
    if metric == "tokenized_bleu":
        return paired_bootstrap(references.moses(baseline), references.moses(system),
                                references.moses(references.lines), samples=samples, tokenize="none")
    tokenize = ours.get("config", {}).get("eval", {}).get("bleu_tokenize", "13a")  # ja-mecab for Japanese
    multi = ours["metrics"].get("multi_reference") and references.streams
    return paired_bootstrap(baseline, system, references.streams if multi else references.lines, samples=samples,
                            tokenize=tokenize)


def _same_score(record: dict, metric: str, tested: float) -> None:
    """Refuses a bootstrap whose BLEU is not the record's number: its daggers would be about another metric."""
    if record["metrics"].get("multi_reference") and metric == "bleu":
        return  # the table shows the mean over test sets; the test runs on the pooled sets (its documented statistic)
    recorded = record["metrics"].get(metric)
    if recorded is not None and abs(recorded - tested) > 0.005:
        raise ValueError(f"the paired bootstrap of {record['hypotheses']} scores {metric} {tested:.2f} but its record "
                         f"says {recorded:.2f}: the test would not be about the table's number; rescore the run "
                         f"(mma-nmt evaluate) or check its translations")


def _compare(ours: dict, base: dict, references: TestReferences, metric: str, samples: int) -> dict:
    """One seed's difference to the baseline of that seed, with its paired bootstrap on the table's metric (a zero
    difference is never significant)."""
    delta = score(ours, metric) - score(base, metric)
    test = _significance(ours, base, references, metric, samples)
    _same_score(ours, metric, test["system_bleu"])
    _same_score(base, metric, test["baseline_bleu"])
    return {"seed": ours["seed"], "delta": delta, "p_value": test["p_value"], "bleu_ci95": test["system_ci"],
            "significant": bool(test["p_value"] < SIGNIFICANT and delta != 0.0)}


def _runs_of(runs: list[PlannedRun], row: str, column: str) -> list[PlannedRun]:
    """The planned runs of one (row, column) cell of a table, in seed order."""
    return [run for run in runs if run.system.name == row and run.dataset.role == column]


def _cell(plan: Plan, name: str, row: str, column: str, records: dict[str, dict],
          references: dict[str, TestReferences], samples: int) -> dict:
    table, runs = plan.experiment.tables[name], plan.tables[name]
    planned = _runs_of(runs, row, column)
    base_row = planned[0].baseline

    def records_of(system: str) -> list[dict]:
        found = [records.get(run.identity) for run in _runs_of(runs, system, column)]
        return [record for record in found if record]

    ours, bases = records_of(row), {record["seed"]: record for record in records_of(base_row)}
    paper, paper_base = table.paper.get(row, {}).get(column), table.paper.get(base_row, {}).get(column)
    entry = {"baseline": base_row, "seeds": [r["seed"] for r in ours],
             "planned_seeds": [s for s in table.seeds_at(plan.scale, row) if s is not None],
             "bleus": [score(r, table.metric) for r in ours], "paper": paper,
             "paper_delta": None if row == base_row or paper is None or paper_base is None
             else round(paper - paper_base, 2)}
    entry.update({f"bleu_{k}" if k != "n" else "n": v for k, v in _spread(entry["bleus"]).items()})
    entry["bleu"] = entry.pop("bleu_mean")
    if row != base_row:
        pairs = [(r, bases[r["seed"]]) for r in ours if r["seed"] in bases]
        if pairs and column not in references:
            references[column] = _references(planned[0])
        entry["per_seed"] = [_compare(r, b, references[column], table.metric, samples) for r, b in pairs]
        deltas = [c["delta"] for c in entry["per_seed"]]
        if deltas:
            spread = _spread(deltas)
            entry.update(delta=spread["mean"], delta_std=spread["std"],
                         significant_seeds=sum(c["significant"] for c in entry["per_seed"]),
                         holds=len({d > 0 for d in deltas}) == 1 and all(c["significant"] for c in entry["per_seed"]))
            if len(pairs) == 1:
                entry.update(p_value=entry["per_seed"][0]["p_value"], significant=entry["per_seed"][0]["significant"])
    return entry


def build_table(plan: Plan, name: str, records: dict[str, dict], *, bootstrap_samples: int = 10000) -> dict:
    """Table ``name`` of ``plan`` as data; ``records`` maps run identities to run records (missing runs are left
    empty)."""
    experiment, table, scale = plan.experiment, plan.experiment.tables[name], plan.scale
    references: dict[str, TestReferences] = {}
    columns = [c for c in table.columns if experiment.has_recipe(c, scale)]
    rows = [{"system": row, "label": experiment.systems[row].label,
             "cells": {column: _cell(plan, name, row, column, records, references, bootstrap_samples)
                       for column in columns}} for row in table.rows]
    runs = []
    for row in table.rows:
        for column in columns:
            for planned in _runs_of(plan.tables[name], row, column):
                record = records.get(planned.identity)
                if record:  # the checksum stays in the record: a table is the same whether or not its records have it
                    run = {key: value for key, value in record.items() if key != CHECKSUM_KEY}
                    runs.append({**run, "row": row, "column": column})
    return {"experiment": experiment.name, "paper": experiment.title, "table": table.name, "title": table.title,
            "scale": scale, "metric": table.metric, "note": table.note,
            "columns": {c: experiment.datasets[c].data_label(scale) for c in columns},
            "paper_columns": {c: experiment.datasets[c].label for c in table.columns},
            "rows": rows, "runs": runs, "seeds": [s for s in table.seeds_at(scale) if s is not None],
            "not_at_this_scale": [experiment.datasets[c].label for c in table.columns if c not in columns],
            "bootstrap_samples": bootstrap_samples, "date": time.strftime("%Y-%m-%d"),
            "git_commit": _git_commit(experiment.path.parent)}


def _num(value, digits: int = 2, signed: bool = False) -> str:
    if value is None:
        return "–"
    return f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"


def _of_seeds(done: int, planned: int) -> str:
    """" (1 of 3 seeds)" while a seeded row is not complete, else ""."""
    return f" ({done} of {planned} seeds)" if planned > 1 and done < planned else ""


def _ours(cell: dict, planned: int) -> str:
    if cell["n"] <= 1:
        return _num(cell["bleu"]) + (_of_seeds(cell["n"], planned) if cell["n"] else "")
    return f"{_num(cell['bleu'])} ± {_num(cell['bleu_std'])}" + (_of_seeds(cell["n"], planned) or f" ({cell['n']})")


def _delta(cell: dict, planned: int) -> str:
    per_seed = cell.get("per_seed") or []
    if not per_seed:
        return "–"
    if len(per_seed) == 1:
        return (_num(per_seed[0]["delta"], signed=True) + significance_mark(per_seed[0]["p_value"])
                + _of_seeds(1, planned))
    seeds = ", ".join(_num(c["delta"], signed=True) + significance_mark(c["p_value"]) for c in per_seed)
    verdict = "holds" if cell["holds"] else "does not hold"
    return (f"{_num(cell['delta'], signed=True)} ± {_num(cell['delta_std'])} (seeds: {seeds}; {verdict} across "
            f"{len(per_seed)} seeds)")


def where_trained(run: dict) -> str:
    """The hardware of ``run`` in a few words; where its training moved between machines (a capped run continued
    elsewhere, or segments logged on different machines), each machine with the update the next one took over at:
    "NVIDIA H200 to update 9800, then Intel Xeon, 1 thread(s)". The last machine named translated the test set."""
    stop = run.get("stopping", {})
    places = []  # (machine, first update trained there, last update trained there); None where not known
    earlier = stop.get("continued_from") or {}
    if earlier.get("hardware"):
        places.append((hardware_name(earlier["hardware"]), 0, earlier.get("step")))
    places += [(hardware_name(segment["hardware"]), segment.get("from_update"), segment.get("to_update"))
               for segment in run.get("training", {}).get("train_segments") or [] if segment.get("hardware")]
    places.append((hardware_name(run.get("hardware", {})), None, None))  # where it was translated
    merged: list[list] = []  # consecutive places on one machine joined
    for machine, first, last in places:
        if merged and merged[-1][0] == machine:
            merged[-1][2] = last if last is not None else merged[-1][2]
        else:
            merged.append([machine, first, last])
    parts = []
    for index, (machine, _, last) in enumerate(merged[:-1]):
        handover = merged[index + 1][1]  # a killed segment's last updates are redone by the next one
        parts.append(f"{machine} to update {handover if handover is not None else last}")
    return ", then ".join(parts + [merged[-1][0]])


def _run_line(run: dict, columns: dict) -> str:
    stop, training, metrics = run.get("stopping", {}), run.get("training", {}), run.get("metrics", {})
    params = f"{training['parameters'] / 1e6:.2f}M" if training.get("parameters") else "–"
    stopped = f"{stop.get('updates', '–')} ({stop.get('reason', '–')}; best {stop.get('best_update', '–')}"
    if stop.get("continued_from"):
        stopped += f"; continued the run capped at {stop['continued_from'].get('max_steps', '–')}"
    stopped += ")"
    folder = f"runs/{run['dataset']}/{run['system']}-seed{run['seed']}-{run['identity']}"
    return "| " + " | ".join([
        run["row"], columns[run["column"]], str(run["seed"]), params, stopped, stop.get("checkpoint", "–"),
        _num(training.get("train_minutes"), 1), _num(training.get("valid_nll"), 3),
        _num(late_descent(run.get("curve") or []), 3, signed=True), _num(metrics.get("bleu")),
        _num(metrics.get("tokenized_bleu")), _num(metrics.get("chrf"), 1), _num(metrics.get("ter"), 1),
        where_trained(run),
        f"[record]({folder}/record.json)"]) + " |"


def _heading(data: dict, command: str) -> list[str]:
    """The table's title and what it is: paper, scale, metric, seeds, date, commit, command, note."""
    metric = ("sacreBLEU (detokenised)" if data["metric"] == "bleu"
              else "tokenised BLEU (Moses-tokenised, multi-bleu style)")
    seeds = f"Seeds: {', '.join(map(str, data['seeds']))}." if data.get("seeds") else "One seed per system."
    lines = [f"## {data['title']}", "",
             f"Paper: {data['paper']}. Scale: **{data['scale']}**. Metric: {metric}. {seeds} Date {data['date']}, "
             f"commit {data['git_commit']}."]
    if data["scale"] != "full":
        lines += ["", "Our numbers are measured on " + "; ".join(f"**{label}**" for label in data["columns"].values())
                  + ", not on the paper's corpora; the paper's columns are the paper's own numbers on its data."]
    if command:
        lines += ["", f"Command: `{command}`"]
    if data["note"]:
        lines += ["", data["note"]]
    if data.get("not_at_this_scale"):
        lines += ["", f"Not run at this scale (no data here; see the experiment's README): "
                      f"{', '.join(data['not_at_this_scale'])}; only the paper's numbers are shown."]
    return lines


def _results(data: dict) -> list[str]:
    """Ours beside the paper's, row by row, and how to read the differences."""
    columns, paper_columns = data["columns"], data["paper_columns"]
    header = ["System"]
    for column, label in columns.items():
        header += [f"ours: {label}", "Δ", f"paper: {paper_columns[column]}", "paper Δ"]
    lines = ["", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in data["rows"]:
        out = [row["label"]]
        for column in columns:
            cell = row["cells"][column]
            planned = len(cell.get("planned_seeds") or [None])
            out += [_ours(cell, planned), _delta(cell, planned), _num(cell["paper"]),
                    _num(cell["paper_delta"], signed=True)]
        lines.append("| " + " | ".join(out) + " |")
    on = ("" if data["metric"] == "bleu" else
          " on the same tokenised BLEU (Moses-tokenised text, sacreBLEU with tokenize=none)")
    if any(run.get("metrics", {}).get("multi_reference") for run in data["runs"]):
        on += (" (where a column has several references per test set, BLEU is the mean over its test sets of "
               "multi-reference BLEU, as the paper; the bootstrap then runs on its test sets pooled, against all "
               "their references)")
    return lines + ["", "ours: mean ± standard deviation over seeds (number of seeds) when there are several. Δ: "
                        "difference to the row's baseline trained with the same seed. Paired bootstrap resampling "
                        f"(sacreBLEU, {data['bootstrap_samples']} samples) of each seed against that baseline{on}: "
                        f"† p < 0.05, †† p < 0.01; (n.s.) = no significant difference. {CLAIM_RULE}"]


def _runs(data: dict) -> list[str]:
    """One line per run, and the sacreBLEU signatures."""
    lines = ["", ("Runs (stop: updates done, why training stopped, the update of the best validation loss; train min: "
                  "wall-clock minutes of training, summed over the segments of a resumed run, under whatever load the "
                  "machine had then: not a speed measurement; valid nll: the validation NLL per target token at the "
                  "last validation, where training stopped (the decoded checkpoint's can be a little lower); last 1k: "
                  "how much the validation NLL still fell over the "
                  "last 1,000 updates before the stop, near 0 where the curve had flattened):"), "",
             "| System | Data | seed | #Params | stop | translated with | train min | valid nll | last 1k | BLEU "
             "| tok. BLEU | chrF | TER | hardware | record |", "|" + "---|" * 15]
    lines += [_run_line(run, data["columns"]) for run in data["runs"]]
    signatures = sorted({run["metrics"]["bleu_signature"] for run in data["runs"]
                         if run.get("metrics", {}).get("bleu_signature")})
    if signatures:
        lines += ["", "sacreBLEU signature: " + "; ".join(f"`{s}`" for s in signatures)]
    return lines


def to_markdown(data: dict, *, command: str = "") -> str:
    return "\n".join(_heading(data, command) + _results(data) + _runs(data)) + "\n"


# ---- never publishing less: what a rebuilt table would lose of what it publishes today ----
#
# A table publishes, per cell (row, column), one run per seed: its BLEU and, for a row compared with a baseline, its
# difference to the baseline of that seed with significance daggers. A rebuild may add runs and change numbers (a run
# retrained, a config changed), but it never silently publishes fewer: a seed, or a run, that had a number and would
# have none, a difference to the baseline that would disappear, or a dagger that would drop (†† to † or n.s.) stops the
# rebuild of that table unless the user allows it (``mma-nmt experiment --allow-fewer``).


def _published(data: dict) -> dict[tuple[str, str, int | None], dict]:
    """(row, column, seed) -> the BLEU and, where the row is compared with a baseline, the difference and its
    significance mark, of every run ``data`` publishes."""
    found = {}
    for row in data.get("rows", []):
        for column, cell in row.get("cells", {}).items():
            seeds, bleus = cell.get("seeds"), cell.get("bleus")
            if seeds is None and cell.get("bleu") is not None:  # a table written before runs were listed per seed
                seeds, bleus = [None], [cell["bleu"]]
            per_seed = {compared.get("seed"): compared for compared in cell.get("per_seed") or []}
            for seed, bleu in zip(seeds or [], bleus or []):
                compared = per_seed.get(seed, {})
                found[row["system"], column, seed] = {
                    "bleu": bleu, "delta": compared.get("delta"),
                    "mark": significance_mark(compared["p_value"]) if "p_value" in compared else ""}
    return found


def _daggers(mark: str) -> int:
    return mark.count("†")


def _delta_text(number: dict) -> str:
    return f"Δ {number['delta']:+.2f}{number['mark']}"


def lost_numbers(old: dict, new: dict) -> list[str]:
    """What table ``new`` would no longer publish of table ``old`` (both as :func:`build_table` returns them), one
    phrase per run: "mma on de_en seed 1 (37.77, Δ +1.18††): no run"."""
    before, after = _published(old), _published(new)
    lost = []
    for (row, column, seed), number in before.items():
        where = f"{row} on {column}" + (f" seed {seed}" if seed is not None else "")
        now = after.get((row, column, seed))
        if now is None:
            shown = f"{number['bleu']:.2f}" + (f", {_delta_text(number)}" if number["delta"] is not None else "")
            lost.append(f"{where} ({shown}): no run")
        elif number["delta"] is not None and now["delta"] is None:
            lost.append(f"{where} ({_delta_text(number)}): no difference to the baseline (its run of that seed is "
                        f"gone)")
        elif number["delta"] is not None and _daggers(now["mark"]) < _daggers(number["mark"]):
            lost.append(f"{where} ({_delta_text(number)}): would become {_delta_text(now)}")
    return lost


def _lost_numbers(path: Path, data: dict) -> list[str]:
    """What the table at ``path`` publishes today that ``data`` would not (:func:`lost_numbers`)."""
    if not path.is_file():
        return []
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        return [f"whatever {path} holds (it cannot be read: {error})"]
    return lost_numbers(old, data)


def _with_relative_hypotheses(data: dict, out_dir: Path) -> dict:
    """``data`` with each run's translations named relative to the table's folder, so that a committed table names
    no path of the machine that wrote it and stays the same wherever it is rebuilt."""
    runs = [{**run, "hypotheses": os.path.relpath(run["hypotheses"], out_dir)} if run.get("hypotheses") else run
            for run in data.get("runs", [])]
    return {**data, "runs": runs}


def write_table(out_dir: Path, data: dict, command: str, *,
                allow_fewer: bool = False) -> tuple[Path | None, str | None]:
    """Writes the table's Markdown, JSON and learning curves; refuses (returns the reason) when the table would publish
    fewer seeds, runs or significance daggers than it does today (:func:`lost_numbers`), unless ``allow_fewer``."""
    name = data["table"]
    lost = _lost_numbers(out_dir / f"{name}.json", data)
    if lost and not allow_fewer:
        return None, (f"{out_dir / (name + '.md')} not rewritten: it publishes {'; '.join(lost)} (a run failed or is "
                      f"not finished, its record was removed, or its config changed); finish or restore those runs, "
                      f"or pass --allow-fewer to publish the table with less")
    if lost:
        print(f"[experiment] {out_dir / (name + '.md')} publishes less than before (--allow-fewer): {'; '.join(lost)}",
              flush=True)
    data["command"] = command
    atomic_write_json(out_dir / f"{name}.json", _with_relative_hypotheses(data, out_dir))
    figure = plot_learning_curves(data, out_dir / f"{name}.curves.png")
    markdown = to_markdown(data, command=command)
    if figure is not None:
        markdown += f"\n![learning curves]({figure.name})\n"
    return atomic_write_text(out_dir / f"{name}.md", markdown), None
