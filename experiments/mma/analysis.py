"""MMA's key analysis on the trained models of the main table: what the global, local, forward and backward heads do.

For the MMA system and the baseline (every seed whose model is on the machine; the table's first dataset by default),
force-decodes test sentences in record mode and writes next to the table:

- ``analysis/mma_head_maps.png``: the encoder self-attention maps of one sentence, every layer and head, titled with
  the head's kind (the first seed);
- ``analysis/mma_distance_entropy.png``: mean attention distance and entropy per encoder head (MLMHA paper eqs.
  13-16), MMA beside the all-global baseline (the first seed);
- ``analysis/mma_heads.md``: the same per kind and seed, and their mean over seeds, as tables, with the models and
  sentences it was measured on;
- ``analysis/mma_heads_rows.json``: the report's rows; those of seeds whose models are not on the machine are kept
  from an earlier run there, so the report spans every seed analysed anywhere.

    python experiments/mma/analysis.py --scale mini           # after `mma-nmt experiment mma --table main --scale mini`
"""

from __future__ import annotations

from mma_nmt.analysis import (head_distance_entropy, head_labels, plot_distance_entropy, plot_sentence_attention,
                              shared_colour_limits)
from mma_nmt.analysis._figures import save_figure
from mma_nmt.data.fileio import atomic_write_text
from mma_nmt.evaluation.force_decode import pieces, sentence_maps
from mma_nmt.experiments.analysis_cli import (analysis_parser, bleu_text, command_line, data_of, describe,
                                              elsewhere_note, force_decoded, mean_sd, missing_models_note, models_of,
                                              output_dir, seed_text, trained_seeds, with_rows_measured_elsewhere)


def per_kind(stats, labels: list[str]) -> dict[str, tuple[float, float]]:
    """Mean distance and entropy over the layers and the heads of each kind."""
    out = {}
    for kind in dict.fromkeys(label[-1] for label in labels):
        heads = [h for h, label in enumerate(labels) if label.endswith(kind)]
        out[kind] = (float(stats.distance[:, heads].mean()), float(stats.entropy[:, heads].mean()))
    return out


def analyse(system: str, args) -> tuple[list[dict], list, tuple]:
    """Per-kind rows of every seed of ``system`` whose model is here, the seeds that are not, and what the figures
    need of the first seed's model: (description, stats, head labels, (records, test split))."""
    models, missing = trained_seeds("mma", "main", system, args)
    rows, first = [], None
    for trained in models:
        records, test = force_decoded(trained, args.sentences)
        config = trained.model.config
        kinds = config.encoder.head_spec if config.encoder.attention == "mma" else "G"
        labels = head_labels(kinds, config.heads)
        stats = head_distance_entropy([r.encoder_self for r in records])
        about = {**describe(trained), "sentences": len(records)}
        rows += [{**about, "kind": kind, "distance": distance, "entropy": entropy}
                 for kind, (distance, entropy) in per_kind(stats, labels).items()]
        first = first or (about, stats, labels, (records, test))
    return rows, missing, first


def main(argv: list[str] | None = None) -> int:
    args = analysis_parser(__doc__, dataset="de_en").parse_args(argv)
    out = output_dir(args, __file__)

    measured, missing, figures = [], {}, {}
    for system in ("mma", "baseline"):
        rows, missing[system], figures[system] = analyse(system, args)
        measured += rows
    _, _, _, (records, test) = figures["mma"]
    index = min(range(len(records)), key=lambda i: abs(records[i].source_length - 12))
    maps = sentence_maps(records[index], source_tokens=pieces(test.src_tokenizer, test.src[index]),
                         target_tokens=pieces(test.tgt_tokenizer, test.tgt[index]) + ["</s>"])
    save_figure(plot_sentence_attention(maps, cell=1.9)["encoder_self"], out / "mma_head_maps.png", dpi=80)
    limits = shared_colour_limits([stats for _, stats, _, _ in figures.values()])  # one colour, one value
    for name, (about, stats, labels, _) in figures.items():
        figure = plot_distance_entropy(stats, head_labels=labels, limits=limits,
                                       title=f"{about['system']} (seed {about['seed']}): encoder self-attention")
        save_figure(figure, out / f"{name}_distance_entropy.png", dpi=80)
    rows = with_rows_measured_elsewhere(out / "mma_heads_rows.json", measured, "mma", "main", missing, args)

    lines = [f"## MMA heads after training ({args.scale} scale, {data_of('mma', args)})", "",
             f"Models: {models_of('main', args)}: baseline and MMA, every seed whose model is on this machine."
             + missing_models_note(missing) + f" Force-decoded the first {rows[0]['sentences']} test sentences "
             f"(`{command_line(__file__, args)}`). Distance: attention-weighted mean |i - j| in subword pieces; "
             f"entropy of each query row in nats (MLMHA paper eqs. 13-16); averaged over layers and the heads of a "
             f"kind.", "",
             "| model | seed | test BLEU | kind | mean distance | mean entropy |", "|---|---|---|---|---|---|"]
    mma_first = figures["mma"][0]["system"]
    ordered = sorted(rows, key=lambda row: (row["system"] != mma_first, row["seed"] or 0))
    for row in ordered:
        lines.append(f"| {row['system']} | {seed_text(row)} | {bleu_text(row)} | {row['kind']} | "
                     f"{row['distance']:.2f} | {row['entropy']:.2f} |")
    lines += elsewhere_note(rows)
    lines += ["", "Mean ± sd over seeds:", "", "| model | kind | mean distance | mean entropy |", "|---|---|---|---|"]
    for system, kind in dict.fromkeys((row["system"], row["kind"]) for row in ordered):
        at = [row for row in rows if row["system"] == system and row["kind"] == kind]
        lines.append(f"| {system} | {kind} | {mean_sd([row['distance'] for row in at])} | "
                     f"{mean_sd([row['entropy'] for row in at])} |")
    lines += ["", "Figures: " + "; ".join(f"{name}, seed {about['seed']} (`{about['checkpoint']}`)"
                                          for name, (about, *_) in figures.items()) + ".", "",
              "![encoder maps of one sentence](mma_head_maps.png)", "",
              "![MMA distance and entropy](mma_distance_entropy.png) "
              "![baseline distance and entropy](baseline_distance_entropy.png)"]
    path = atomic_write_text(out / "mma_heads.md", "\n".join(lines) + "\n")
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
