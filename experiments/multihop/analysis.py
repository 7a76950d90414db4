"""Multi-hop attention's head gate on the trained models of the main table: how the second hop weighs the heads of
encoder layer 4 (the paper's best position), per seed.

The head gate turns the second hop's scores over the H heads into weights that sum to 1 at every source position;
uniform weights (1/H each) would make the second hop a plain average. Writes next to the table:

- ``analysis/multihop_head_gate_layer<n>.png``: mean head-gate weight of each head over the test positions, +- one
  standard deviation (the first seed whose model is on the machine), for each layer n with the second hop;
- ``analysis/multihop_gate.md``: per seed, each head's mean weight and the mean entropy of the gate at a position
  against the uniform gate's log H;
- ``analysis/multihop_gate_rows.json``: the report's rows; those of seeds whose models are not on the machine are
  kept from an earlier run there, so the report spans every seed analysed anywhere.

    python experiments/multihop/analysis.py --scale mini        # after `mma-nmt experiment multihop --table main`
"""

from __future__ import annotations

import math

import torch

from mma_nmt.analysis import plot_head_gates
from mma_nmt.analysis._figures import save_figure
from mma_nmt.analysis.distance_entropy import attention_entropy
from mma_nmt.data.fileio import atomic_write_text
from mma_nmt.experiments.analysis_cli import (analysis_parser, bleu_text, command_line, data_of, describe,
                                              elsewhere_note, force_decoded, missing_models_note, models_of,
                                              output_dir, seed_text, trained_seeds, with_rows_measured_elsewhere)

SYSTEM = "hop4"


def main(argv: list[str] | None = None) -> int:
    args = analysis_parser(__doc__, dataset="iwslt_de_en").parse_args(argv)
    out = output_dir(args, __file__)
    models, missing = trained_seeds("multihop", "main", SYSTEM, args)
    rows = []
    for index, trained in enumerate(models):
        records, _ = force_decoded(trained, args.sentences)
        for layer in sorted(records[0].head_gate):
            gate = torch.cat([r.head_gate[layer] for r in records], dim=1).double()  # H x (H, S) -> (H, N positions)
            about = {**describe(trained, metric="tokenized_bleu"), "layer": layer + 1, "positions": gate.shape[1],
                     "sentences": len(records), "means": gate.mean(dim=1).tolist(),
                     "entropy": float(attention_entropy(gate.transpose(0, 1)).mean()), "heads": gate.shape[0]}
            rows.append(about)
            if index == 0:
                figure = plot_head_gates(gate, title=f"{trained.cell.system.name} (seed {trained.cell.seed}): head "
                                                      f"gate of encoder layer {layer + 1}, {gate.shape[1]} test "
                                                      f"positions")
                save_figure(figure, out / f"multihop_head_gate_layer{layer + 1}.png", dpi=80)

    rows = with_rows_measured_elsewhere(out / "multihop_gate_rows.json", rows, "multihop", "main", {SYSTEM: missing},
                                        args)
    heads = rows[0]["heads"]
    lines = [f"## Multi-hop head gate after training ({args.scale} scale, {data_of('multihop', args)})", "",
             f"`{command_line(__file__, args)}`: {models_of('main', args)}, the first {rows[0]['sentences']} "
             f"test sentences force-decoded; the gate's weight of each head at every source position of the layer with "
             f"the second hop. Entropy: of the gate at one position, averaged (uniform gate: log {heads} = "
             f"{math.log(heads):.3f} nats)."
             + missing_models_note({SYSTEM: missing}), "",
             "| seed | test BLEU (tokenized) | layer | " + " | ".join(f"head {h + 1}" for h in range(heads))
             + " | gate entropy |", "|---" * (heads + 4) + "|"]
    for row in rows:
        lines.append(f"| {seed_text(row)} | {bleu_text(row)} | {row['layer']} | "
                     + " | ".join(f"{m:.3f}" for m in row["means"]) + f" | {row['entropy']:.3f} |")
    lines += elsewhere_note(rows)
    lines += [""] + [f"![head gate, layer {layer}](multihop_head_gate_layer{layer}.png)"
                     for layer in sorted({row["layer"] for row in rows})]
    path = atomic_write_text(out / "multihop_gate.md", "\n".join(lines) + "\n")
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
