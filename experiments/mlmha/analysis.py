"""MLMHA's attention-distance and entropy analysis (paper section 6, Figures 5-7) on the trained models of the main
table: for the baseline and the paper's best variant M-10, the mean attention distance and the entropy of the
attention distribution of every encoder self-attention head, per layer.

Writes next to the table:

- ``analysis/<system>_distance_entropy.png``: distance and entropy per encoder layer and head (the lowest seed whose
  model is on disk);
- ``analysis/mlmha_layers_by_seed.png``: the layer means of the report below against the layer, one line per system
  and seed (those measured elsewhere included), so a difference that holds on every seed shows as two bands apart;
- ``analysis/mlmha_layers.md``: the same averaged over the heads of each layer, for every seed of the baseline and M-10
  whose model is on disk (the run records keep the scores, not the models; the report names the seeds it lacks);
- ``analysis/mlmha_layers_rows.json``: the report's rows; those of seeds whose models are not on the machine are kept
  from an earlier run there, so the report spans every seed analysed anywhere.

    # after `mma-nmt experiment mlmha --table main --scale mini`:
    python experiments/mlmha/analysis.py --scale mini
"""

from __future__ import annotations

from mma_nmt.analysis import head_distance_entropy, plot_distance_entropy, plot_layer_profiles, shared_colour_limits
from mma_nmt.analysis._figures import save_figure
from mma_nmt.data.fileio import atomic_write_text
from mma_nmt.experiments.analysis_cli import (analysis_parser, bleu_text, command_line, data_of, describe,
                                              elsewhere_note, force_decoded, missing_models_note, models_of,
                                              output_dir, seed_text, trained_seeds, with_rows_measured_elsewhere)

SYSTEMS = ("baseline", "m10")


def main(argv: list[str] | None = None) -> int:
    args = analysis_parser(__doc__, dataset="en_de").parse_args(argv)
    out = output_dir(args, __file__)
    measured, absent, figures = [], {}, {}
    for system in SYSTEMS:
        models, missing = trained_seeds("mlmha", "main", system, args)
        absent[system] = missing
        for index, trained in enumerate(models):
            records, _ = force_decoded(trained, args.sentences)
            stats = head_distance_entropy([r.encoder_self for r in records])  # (L, H) each
            about = {**describe(trained), "sentences": len(records)}
            for layer in range(stats.distance.shape[0]):  # one row per layer: mean and min-max over its heads
                distance, entropy = stats.distance[layer], stats.entropy[layer]
                measured.append({**about, "layer": layer + 1, "distance": float(distance.mean()),
                                 "distance_range": [float(distance.min()), float(distance.max())],
                                 "entropy": float(entropy.mean()),
                                 "entropy_range": [float(entropy.min()), float(entropy.max())]})
            if index == 0:
                figures[system] = (stats, f"{trained.cell.system.name} (seed {trained.cell.seed}): encoder "
                                          f"self-attention")
    limits = shared_colour_limits([stats for stats, _ in figures.values()])  # one colour, one value, in both figures
    for system, (stats, title) in figures.items():
        save_figure(plot_distance_entropy(stats, title=title, limits=limits), out / f"{system}_distance_entropy.png",
                    dpi=80)

    rows = with_rows_measured_elsewhere(out / "mlmha_layers_rows.json", measured, "mlmha", "main", absent, args)
    save_figure(plot_layer_profiles(layer_profiles(rows), title=f"Encoder self-attention per layer, every seed "
                                                                f"({data_of('mlmha', args)})"),
                out / "mlmha_layers_by_seed.png", dpi=80)
    sentences = rows[0]["sentences"]
    lines = [f"## Encoder attention distance and entropy per layer ({args.scale} scale, {data_of('mlmha', args)})", "",
             f"`{command_line(__file__, args)}`: {models_of('main', args)}, the first {sentences} test "
             f"sentences force-decoded. Distance: attention-weighted mean |i - j| in subword pieces; entropy of each "
             f"query row in nats (paper eqs. 13-16); each averaged over the heads of the layer (min-max over the "
             f"heads in brackets)." + missing_models_note(absent), "",
             "| model | seed | test BLEU | layer | mean distance | mean entropy |", "|---|---|---|---|---|---|"]
    for row in rows:
        (distance_min, distance_max), (entropy_min, entropy_max) = row["distance_range"], row["entropy_range"]
        lines.append(f"| {row['system']} | {seed_text(row)} | {bleu_text(row)} | {row['layer']} | "
                     f"{row['distance']:.2f} ({distance_min:.2f}-{distance_max:.2f}) | "
                     f"{row['entropy']:.2f} ({entropy_min:.2f}-{entropy_max:.2f}) |")
    lines += elsewhere_note(rows)
    lines += ["", "![every seed](mlmha_layers_by_seed.png)", ""]
    lines += [f"![{system}](" + f"{system}_distance_entropy.png)" for system in SYSTEMS]
    path = atomic_write_text(out / "mlmha_layers.md", "\n".join(lines) + "\n")
    print(path)
    return 0


def layer_profiles(rows: list[dict]) -> dict[str, list[tuple[str, list[float], list[float]]]]:
    """The report's rows (one per system, seed and layer) as :func:`plot_layer_profiles` takes them: per system, per
    seed, the layer distances and entropies in layer order."""
    profiles: dict[str, dict[str, list[dict]]] = {}
    for row in sorted(rows, key=lambda r: r["layer"]):  # stable: systems and seeds keep the report's order
        profiles.setdefault(row["system"], {}).setdefault(f"seed {seed_text(row)}", []).append(row)
    return {system: [(seed, [r["distance"] for r in layers], [r["entropy"] for r in layers])
                     for seed, layers in seeds.items()]
            for system, seeds in profiles.items()}


if __name__ == "__main__":
    raise SystemExit(main())
