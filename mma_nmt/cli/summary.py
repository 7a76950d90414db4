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
    lines = [f"BLEU  {scores['bleu']:6.2f}   {scores['bleu_signature']}",
             f"chrF  {scores['chrf']:6.2f}",
             f"TER   {scores['ter']:6.2f}"]
    if scores.get("tokenized_bleu") is not None:
        lines.append(f"BLEU on Moses-tokenised text (as the papers report it): {scores['tokenized_bleu']:.2f}")
    if "sentences" in scores:
        lines.append(f"{scores['sentences']} sentences")
    boot = scores.get("bootstrap")
    if boot:
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
