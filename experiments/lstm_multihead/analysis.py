"""The multi-head LSTM paper's key analysis (its Figure 1) on the trained models of the heads table: each head's
response by relative source position, for every seed of the 4-head model, ordered from the worst run to the best.

The paper sums each head's attention weights by relative position s - t over the test set and finds that its better
4-head run has heads that respond more differently. Writes next to the table:

- ``analysis/lstm_head_response.png``: one panel per seed of h = 4 (worst to best test BLEU), one line per head;
- ``analysis/lstm_heads.md``: per run, the test BLEU, each head's peak offset and the head divergence (mean
  total-variation distance between the heads' responses within +-10 positions: 0 = identical heads);
- ``analysis/lstm_heads_rows.json``: the report's rows; those of seeds whose models are not on the machine are kept
  from an earlier run there, so the report spans every seed analysed anywhere (the figure shows the seeds here).

    # after `mma-nmt experiment lstm_multihead --table heads`:
    python experiments/lstm_multihead/analysis.py --scale mini
"""

from __future__ import annotations

import math

from mma_nmt.analysis import head_divergence, plot_relative_position_panels, relative_position_response
from mma_nmt.analysis._figures import save_figure
from mma_nmt.data.fileio import atomic_write_text
from mma_nmt.experiments.analysis_cli import (analysis_parser, bleu_text, command_line, data_of, describe,
                                              elsewhere_note, force_decoded, missing_models_note, models_of,
                                              output_dir, seed_text, trained_seeds, with_rows_measured_elsewhere)

WINDOW = 10  # offsets shown and compared: s - t within +-10 source positions


def responses(system: str, args) -> tuple[list[tuple[dict, object]], list]:
    """(description, response of the single attention layer) per trained seed, worst test BLEU first."""
    models, missing = trained_seeds("lstm_multihead", "heads", system, args)
    runs = []
    for trained in models:
        records, _ = force_decoded(trained, args.sentences)
        about = {**describe(trained, metric="tokenized_bleu"), "sentences": len(records)}
        runs.append((about, relative_position_response([r.cross[-1] for r in records])))  # (H, T, S) per sentence
    runs.sort(key=lambda run: run[0]["bleu"] if run[0]["bleu"] is not None else float("-inf"))
    return runs, missing


def main(argv: list[str] | None = None) -> int:
    args = analysis_parser(__doc__, dataset="en_vi", sentences=1000).parse_args(argv)
    out = output_dir(args, __file__)
    multi, missing = responses("h4", args)
    single, single_missing = responses("h1", args)

    panels = {f"h = 4, seed {about['seed']}: {bleu_text(about)} BLEU, divergence "
              f"{head_divergence(result, window=WINDOW):.3f}": result for about, result in multi}
    figure = plot_relative_position_panels(panels, window=WINDOW, title=(
        f"Per-head response by relative position s - t ({multi[0][0]['sentences']} test sentences), h = 4 runs from "
        f"the worst to the best test BLEU"))
    save_figure(figure, out / "lstm_head_response.png", dpi=80)

    data = data_of("lstm_multihead", args)
    lines = [f"## Heads of the multi-head LSTM after training ({args.scale} scale, {data})", "",
             f"`{command_line(__file__, args)}`: {models_of('heads', args)}, the first "
             f"{multi[0][0]['sentences']} test sentences force-decoded; each head's attention summed by relative "
             f"position s - t (paper Figure 1). Divergence: mean over head pairs of the total-variation distance "
             f"between their normalised responses within +-{WINDOW} positions (0 = the heads respond alike)."
             + missing_models_note({"h = 1": single_missing, "h = 4": missing}), "",
             "| model | seed | test BLEU (tokenized) | peak offset per head | head divergence |",
             "|---|---|---|---|---|"]
    measured = [{**about, "peaks": [int(p) for p in result.peak_offsets()],
                 "divergence": head_divergence(result, window=WINDOW)} for about, result in single + multi]
    rows = with_rows_measured_elsewhere(out / "lstm_heads_rows.json", measured, "lstm_multihead", "heads",
                                        {"h1": single_missing, "h4": missing}, args)
    for row in sorted(rows, key=lambda row: (row["system"], -math.inf if row["bleu"] is None else row["bleu"])):
        divergence = row["divergence"]  # NaN (one head) is written to JSON as NaN and read back as NaN
        divergence_text = "–" if math.isnan(divergence) else f"{divergence:.3f}"
        lines.append(f"| {row['system']} | {seed_text(row)} | {bleu_text(row)} | "
                     f"{', '.join(map(str, row['peaks']))} | {divergence_text} |")
    lines += elsewhere_note(rows)
    lines += ["", "![per-head response, h = 4](lstm_head_response.png)"]
    path = atomic_write_text(out / "lstm_heads.md", "\n".join(lines) + "\n")
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
