"""A table's results laid out like the paper's: our BLEU, the difference to the baseline with paired-bootstrap
significance, the paper's numbers beside ours; then one line per run (parameters, training speed, other metrics)."""

from __future__ import annotations

import platform
import subprocess
import time
from pathlib import Path

from mma_nmt.data.fileio import read_text_lines
from mma_nmt.experiments.spec import Experiment, Table, resolved_run_config

SIGNIFICANT = 0.05


def _git_commit(where: Path) -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=where, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _references(experiment: Experiment, system: str, role: str, scale: str) -> list[str]:
    from mma_nmt.data import ParallelDataset

    cell = experiment.cell(system, role, scale)
    run = resolved_run_config(cell, Path("unused"))
    return ParallelDataset.load(run.prepared_dir(), run.eval.split).tgt_text


def significance_mark(p_value: float | None) -> str:
    if p_value is None:
        return ""
    return "††" if p_value < 0.01 else "†" if p_value < SIGNIFICANT else " (n.s.)"


def build_table(experiment: Experiment, table: Table, scale: str, results: dict[str, dict], *,
                bootstrap_samples: int = 1000) -> dict:
    """The table as data; ``results`` maps run identities to ``result.json`` contents (missing runs are left empty)."""
    from mma_nmt.evaluation.bootstrap import paired_bootstrap

    def result(row: str, column: str) -> dict | None:
        if not experiment.has_recipe(column, scale):
            return None
        return results.get(experiment.cell(row, column, scale).identity)

    rows, references = [], {}
    for row in table.rows:
        cells = {}
        for column in table.columns:
            ours, base_row = result(row, column), table.baseline_of(row)
            base = result(base_row, column)
            paper = table.paper.get(row, {}).get(column)
            paper_base = table.paper.get(base_row, {}).get(column)
            entry = {"bleu": ours[table.metric] if ours else None, "baseline": base_row, "paper": paper,
                     "paper_delta": None if row == base_row or paper is None or paper_base is None
                     else round(paper - paper_base, 2)}
            if ours and base and row != base_row:
                entry["delta"] = ours[table.metric] - base[table.metric]
                if column not in references:
                    references[column] = _references(experiment, row, column, scale)
                test = paired_bootstrap(read_text_lines(base["hypotheses"]), read_text_lines(ours["hypotheses"]),
                                        references[column], samples=bootstrap_samples)
                entry.update(p_value=test["p_value"], bleu_ci95=test["system_ci"],
                             significant=test["p_value"] < SIGNIFICANT)
            cells[column] = entry
        rows.append({"system": row, "label": experiment.systems[row].label, "cells": cells})
    runs = []
    for row in table.rows:
        for column in table.columns:
            found = result(row, column)
            if found:
                runs.append({"system": row, "dataset": column, **found})
    return {"experiment": experiment.name, "paper": experiment.title, "table": table.name, "title": table.title,
            "scale": scale, "metric": table.metric, "note": table.note,
            "columns": {c: experiment.datasets[c].label for c in table.columns}, "rows": rows, "runs": runs,
            "not_at_this_scale": [experiment.datasets[c].label for c in table.columns
                                  if not experiment.has_recipe(c, scale)],
            "bootstrap_samples": bootstrap_samples, "date": time.strftime("%Y-%m-%d"),
            "git_commit": _git_commit(experiment.path.parent), "machine": f"{platform.node()} {platform.machine()}"}


def _num(value, digits: int = 2, signed: bool = False) -> str:
    if value is None:
        return "–"
    return f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"


def to_markdown(data: dict, *, command: str = "") -> str:
    columns = data["columns"]
    metric = "sacreBLEU (detokenised)" if data["metric"] == "bleu" else "tokenised BLEU (Moses-tokenised, multi-bleu style)"
    lines = [f"## {data['title']}", "",
             f"Paper: {data['paper']}. Scale: **{data['scale']}**. Metric: {metric}. Date {data['date']}, "
             f"commit {data['git_commit']}."]
    if command:
        lines += ["", f"Command: `{command}`"]
    if data["note"]:
        lines += ["", data["note"]]
    if data.get("not_at_this_scale"):
        lines += ["", f"Not run at this scale (no data here; see the experiment's README): "
                      f"{', '.join(data['not_at_this_scale'])}; only the paper's numbers are shown."]
    header = ["System"] + [f"{label} {part}" for label in columns.values() for part in ("ours", "Δ", "paper", "paper Δ")]
    lines += ["", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in data["rows"]:
        out = [row["label"]]
        for column in columns:
            cell = row["cells"][column]
            delta = "–" if "delta" not in cell else _num(cell["delta"], signed=True) + significance_mark(
                cell.get("p_value"))
            out += [_num(cell["bleu"]), delta, _num(cell["paper"]), _num(cell["paper_delta"], signed=True)]
        lines.append("| " + " | ".join(out) + " |")
    on = "" if data["metric"] == "bleu" else " (the test runs on sacreBLEU, the Δ column on tokenised BLEU)"
    lines += ["", f"Δ: difference to the row's baseline. Paired bootstrap resampling (sacreBLEU, "
                  f"{data['bootstrap_samples']} samples) of sacreBLEU against that baseline{on}: † p < 0.05, "
                  "†† p < 0.01; (n.s.) = no significant difference."]
    lines += ["", "Runs:", "",
              "| System | Dataset | #Params | seed | train tok/s | steps | train min | valid nll | BLEU | tok. BLEU "
              "| chrF | TER | decode sent/s | run |", "|" + "---|" * 14]
    for run in data["runs"]:
        params = f"{run['parameters'] / 1e6:.2f}M" if run.get("parameters") else "–"
        lines.append("| " + " | ".join([
            run["system"], columns[run["dataset"]], params, str(run.get("seed", "–")),
            _num(run.get("train_tokens_per_s"), 0),
            str(run.get("train_steps", "–")), _num(run.get("train_minutes"), 1), _num(run.get("valid_nll"), 3),
            _num(run.get("bleu")), _num(run.get("tokenized_bleu")), _num(run.get("chrf"), 1), _num(run.get("ter"), 1),
            _num(run.get("decode_sentences_per_s"), 1), f"`{run['run_dir']}`"]) + " |")
    signatures = sorted({run["bleu_signature"] for run in data["runs"] if run.get("bleu_signature")})
    if signatures:
        lines += ["", "sacreBLEU signature: " + "; ".join(f"`{s}`" for s in signatures)]
    return "\n".join(lines) + "\n"
