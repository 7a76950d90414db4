"""MLMHA paper Table 7: BLEU of the trained M-ij models (n = L) when one encoder layer's output f_i is replaced by
zeros at test time, against the same model with nothing masked.

The runs are the experiment's own: train them first (``mma-nmt experiment mlmha --table main --scale mini``), then,
from the same working directory::

    python experiments/mlmha/layer_masking.py --scale mini [--runs-dir runs/experiments] [--systems m00 m10]

It finds each system's finished run of the WMT'14 En-De column (its Multi30k stand-in below full scale), decodes the
test split once per masked layer with the run's decoding settings and checkpoint, and writes ``layer_masking.md`` /
``.json`` under ``experiments/mlmha/results/<scale>/`` (or ``--results-dir``): BLEU differences to the unmasked model
with paired-bootstrap significance, beside the paper's.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from mma_nmt.analysis import layer_masking_table
from mma_nmt.data import ParallelDataset
from mma_nmt.data.fileio import atomic_write_json, atomic_write_text
from mma_nmt.decoding.translate import special_ids, translate_ids
from mma_nmt.evaluation.bootstrap import paired_bootstrap
from mma_nmt.evaluation.scoring import moses_detokenize
from mma_nmt.experiments.report import _num, significance_mark
from mma_nmt.experiments.runner import CELL_FILE, RESULT_FILE, read_json
from mma_nmt.experiments.spec import load_experiment
from mma_nmt.models.attention_adapters import MultiLayerCrossAttention
from mma_nmt.training.checkpoint import load_model
from mma_nmt.training.config import run_config_from_dict

HERE = Path(__file__).resolve().parent
# Paper Table 7: BLEU difference per masked encoder layer (1..6); base BLEU of the unmasked models.
PAPER = {"m00": [-15.25, -0.49, -0.27, 0.03, -1.79, -9.85], "m01": [-24.99, -0.19, -0.09, 0.13, -0.81, -1.49],
         "m10": [-0.83, -1.32, -1.05, -1.00, -1.50, -1.09], "m11": [-0.26, -1.13, -0.83, -1.43, -1.34, -0.10]}
PAPER_BASE = {"m00": 28.80, "m01": 28.54, "m10": 29.08, "m11": 28.51}


def mask_one_run(run_dir: Path, *, split: str | None, bootstrap_samples: int) -> dict:
    """Decodes ``split`` with each encoder layer masked in turn; returns BLEU, differences and p-values."""
    if not (run_dir / RESULT_FILE).is_file():
        raise FileNotFoundError(f"{run_dir} is not a finished run (no {RESULT_FILE}); run the experiment's table first")
    cell, result = read_json(run_dir / CELL_FILE), read_json(run_dir / RESULT_FILE)
    config = json.loads(json.dumps(cell["config"]))
    config.setdefault("train", {})["save_dir"] = str(run_dir)
    run = run_config_from_dict(config)
    if run.train.threads:
        torch.set_num_threads(run.train.threads)
    model, _ = load_model(run_dir / result["checkpoint"])
    attentions = [layer.cross_attn for layer in model.decoder_layers]
    if not all(isinstance(a, MultiLayerCrossAttention) for a in attentions):
        raise ValueError(f"{run_dir}: system {cell['system']!r} has no MLMHA cross-attention to mask")
    collectors = [a.collector for a in attentions]
    num_layers = collectors[0].num_encoder_layers
    if collectors[0].first_layer != 1:
        raise ValueError(f"{run_dir}: reads only the top {num_layers - collectors[0].first_layer + 1} of {num_layers} "
                         f"encoder layers; Table 7 masks models with n = L")
    data = ParallelDataset.load(run.prepared_dir(), split or run.eval.split)
    lang = data.meta.get("corpus", {}).get("tgt_lang", "en")
    outputs: dict[int | None, list[str]] = {}

    def translate(masked_layer: int | None) -> list[str]:
        for collector in collectors:
            collector.masked_layer = masked_layer
        hyps = translate_ids(model, list(data.src), run.decode, special_ids(data.tgt_tokenizer))
        lines = [data.tgt_tokenizer.decode(h.tokens) for h in hyps]
        outputs[masked_layer] = moses_detokenize(lines, lang) if run.eval.detokenize == "moses" else lines
        print(f"[layer masking] {cell['system']}: masked layer {masked_layer}", flush=True)
        return outputs[masked_layer]

    rows = layer_masking_table(translate, data.tgt_text, num_layers=num_layers)
    for collector in collectors:
        collector.masked_layer = None
    out = []
    for row in rows:
        entry = {"masked_layer": row.masked_layer, "bleu": row.bleu, "delta": row.delta}
        if row.masked_layer is not None:
            test = paired_bootstrap(outputs[None], outputs[row.masked_layer], data.tgt_text, samples=bootstrap_samples)
            entry["p_value"] = test["p_value"]
        out.append(entry)
    return {"system": cell["system"], "run_dir": str(run_dir), "checkpoint": result["checkpoint"],
            "split": split or run.eval.split, "rows": out}


def to_markdown(runs: list[dict], *, scale: str, command: str) -> str:
    lines = ["## Table 7: BLEU difference when one encoder layer's output f_i is zeroed at test time (n = L)", "",
             f"Scale: **{scale}**. Metric: sacreBLEU. Date {time.strftime('%Y-%m-%d')}.", "",
             f"Command: `{command}`", "",
             "| masked layer | " + " | ".join(f"{r['system']} Δ ours | {r['system']} Δ paper" for r in runs) + " |",
             "|---|" + "---|---|" * len(runs),
             "| none (BLEU) | " + " | ".join(f"{r['rows'][0]['bleu']:.2f} | {_num(PAPER_BASE.get(r['system']))}"
                                           for r in runs) + " |"]
    for i in range(1, max(len(r["rows"]) for r in runs)):
        cells = []
        for r in runs:
            row = r["rows"][i] if i < len(r["rows"]) else None
            paper = PAPER.get(r["system"], [])
            cells.append("–" if row is None else f"{row['delta']:+.2f}{significance_mark(row.get('p_value'))}")
            cells.append(f"{paper[i - 1]:+.2f}" if i - 1 < len(paper) else "–")
        lines.append(f"| {i} | " + " | ".join(cells) + " |")
    lines += ["", "Δ: BLEU with that layer's f_i zeroed minus BLEU of the same model unmasked. Paired bootstrap "
                  "resampling against the unmasked output: † p < 0.05, †† p < 0.01, (n.s.) = no significant "
                  "difference. The paper's significance marks are in experiments/mlmha/README.md.", "",
              "Runs: " + ", ".join(f"`{r['run_dir']}` ({r['checkpoint']}, split {r['split']})" for r in runs)]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", default="mini", choices=["full", "mini", "smoke"])
    parser.add_argument("--systems", nargs="+", default=list(PAPER), help="MLMHA systems with n = L (default: all)")
    parser.add_argument("--dataset", default="en_de", help="dataset role (default: en_de, the paper's)")
    parser.add_argument("--runs-dir", default="runs/experiments")
    parser.add_argument("--results-dir", help="default: experiments/mlmha/results/<scale>")
    parser.add_argument("--split", help="default: the run's eval split")
    parser.add_argument("--bootstrap-samples", type=int, default=1000)
    args = parser.parse_args(argv)
    experiment = load_experiment(HERE)
    runs = []
    for system in args.systems:
        cell = experiment.cell(system, args.dataset, args.scale, runs_dir=args.runs_dir)
        runs.append(mask_one_run(cell.run_dir, split=args.split, bootstrap_samples=args.bootstrap_samples))
    out_dir = Path(args.results_dir) if args.results_dir else HERE / "results" / args.scale
    command = "python experiments/mlmha/layer_masking.py " + " ".join(sys.argv[1:] if argv is None else argv)
    atomic_write_json(out_dir / "layer_masking.json", {"scale": args.scale, "command": command, "runs": runs,
                                                       "paper": PAPER, "paper_base": PAPER_BASE})
    path = atomic_write_text(out_dir / "layer_masking.md", to_markdown(runs, scale=args.scale, command=command))
    print(f"[layer masking] wrote {path}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
