"""What the commands print for a person, and where their JSON goes.

``demo``, ``translate``, ``evaluate`` and ``train`` print a short summary (scores with sacreBLEU's signature, BLEU by
source length, the files written) and write the full result as JSON to a file; ``--json`` prints that JSON on stdout
instead of the summary, for scripts.
"""

from __future__ import annotations

import json
from pathlib import Path

from mma_nmt.data.fileio import atomic_write_json


def scores_path(hypotheses: str | Path) -> Path:
    """Where the scores of a hypothesis file go: ``test.hyp.txt`` -> ``test.scores.json`` beside it."""
    hypotheses = Path(hypotheses)
    stem = hypotheses.name.removesuffix(".txt").removesuffix(".hyp")
    return hypotheses.with_name(stem + ".scores.json")


def scores_lines(scores: dict) -> list[str]:
    """BLEU (with signature), chrF, TER, tokenised BLEU, the bootstrap against a baseline and BLEU by source length."""
    chrf_name = "chrF++" if scores.get("chrf_name", "").endswith("++") else "chrF"
    lines = [f"BLEU  {scores['bleu']:6.2f}   {scores['bleu_signature']}",
             f"{chrf_name:<6}{scores['chrf']:6.2f}" + (f"   {scores['chrf_signature']}" if scores.get("chrf_signature")
                                                       else ""),
             f"TER   {scores['ter']:6.2f}"]
    if scores.get("tokenized_bleu") is not None:
        lines.append(f"BLEU on Moses-tokenised text (as the papers report it): {scores['tokenized_bleu']:.2f}")
    if "sentences" in scores:
        lines.append(f"{scores['sentences']} sentences")
    lines += significance_lines(scores.get("significance") or {}, chrf_name)
    boot = scores.get("bootstrap")
    if boot and not scores.get("significance"):
        lines.append(f"paired bootstrap ({boot['samples']} samples): baseline BLEU {boot['baseline_bleu']:.2f}, "
                     f"this system {boot['system_bleu']:.2f} "
                     f"(mean {boot['system_mean']:.2f} +- {boot['system_ci']:.2f}), p = {boot['p_value']:.4f}")
    rows = scores.get("bleu_by_source_length") or []
    if rows:
        lines += ["", "BLEU by source length (words)", f"  {'length':<10} {'sentences':>9} {'BLEU':>6}"]
        for row in rows:
            if row["sentences"]:
                lines.append(f"  {row['label']:<10} {row['sentences']:>9} {row['bleu']:>6.2f}")
    return lines


def significance_lines(significance: dict, chrf_name: str = "chrF") -> list[str]:
    """The paired tests against a baseline: one line per metric, the bootstrap's and the randomization's p-value."""
    if not significance:
        return []
    tests = {"bootstrap": "paired bootstrap", "randomization": "approximate randomization"}
    shown = {name: significance[name] for name in tests if name in significance}
    counts = ", ".join(f"{tests[name]}: {next(iter(result.values()))['samples']} "
                       f"{'resamples' if name == 'bootstrap' else 'trials'}" for name, result in shown.items())
    lines = ["", f"Against the baseline ({counts})",
             f"  {'metric':<7} {'baseline':>8} {'system':>8} {'delta':>7}" + "".join(f" {'p (' + n + ')':>19}"
                                                                                for n in shown)]
    for metric, label in (("bleu", "BLEU"), ("chrf", chrf_name), ("ter", "TER")):
        first = next((result[metric] for result in shown.values() if metric in result), None)
        if first is None:
            continue
        row = (f"  {label:<7} {first['baseline']:>8.2f} {first['system']:>8.2f} "
               f"{first['system'] - first['baseline']:>+7.2f}")
        lines.append(row + "".join(f" {result[metric]['p_value']:>19.4f}" for result in shown.values()))
    return lines + ["  (TER: lower is better; both tests are two-sided)"]


def files_lines(files: dict[str, str | Path]) -> list[str]:
    """``{"translations": path, ...}`` as an aligned "Files" block."""
    if not files:
        return []
    width = max(len(name) for name in files)
    return ["", "Files"] + [f"  {name:<{width}}  {path}" for name, path in files.items()]


def train_lines(result: dict) -> list[str]:
    """The validation result of a finished training run."""
    parts = [f"{key.removeprefix('valid_')} {value:.3f}" for key, value in result.items()
             if key.startswith("valid_") and isinstance(value, (int, float))]
    return ["validation: " + ", ".join(parts)] if parts else []


def report(result: dict, lines: list[str], *, json_path: str | Path | None, as_json: bool) -> None:
    """Writes ``result`` to ``json_path`` (when given) and prints either the summary ``lines`` or, with ``as_json``,
    the JSON itself."""
    if json_path is not None:
        Path(json_path).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(Path(json_path), result)
    if as_json:
        print(json.dumps(result, indent=2, ensure_ascii=False))
    else:
        print("\n".join(lines), flush=True)
