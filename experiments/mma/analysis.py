"""MMA's key analysis on the trained models of the main table: what the global, local, forward and backward heads do.

For the MMA system and the baseline (seed 1, the table's first dataset by default), force-decodes test sentences in
record mode and writes next to the table:

- ``analysis/mma_head_maps.png``: the encoder self-attention maps of one sentence, every layer and head, titled with
  the head's kind;
- ``analysis/mma_distance_entropy.png``: mean attention distance and entropy per encoder head (MLMHA paper eqs.
  13-16), MMA beside the all-global baseline;
- ``analysis/mma_heads.md``: the same per kind, as a table, with the models and sentences it was measured on.

    python experiments/mma/analysis.py --scale mini           # after `mma-nmt experiment mma --table main --scale mini`
"""

from __future__ import annotations

from mma_nmt.analysis import head_distance_entropy, head_labels, plot_distance_entropy, plot_sentence_attention
from mma_nmt.analysis._figures import save_figure
from mma_nmt.data.fileio import atomic_write_text
from mma_nmt.evaluation.force_decode import pieces, sentence_maps
from mma_nmt.experiments.analysis_cli import (analysis_parser, bleu_text, command_line, data_of, describe,
                                              force_decoded, load_trained, models_of, output_dir)


def per_kind(stats, labels: list[str]) -> dict[str, tuple[float, float]]:
    """Mean distance and entropy over the layers and the heads of each kind."""
    out = {}
    for kind in dict.fromkeys(label[-1] for label in labels):
        heads = [h for h, label in enumerate(labels) if label.endswith(kind)]
        out[kind] = (float(stats.distance[:, heads].mean()), float(stats.entropy[:, heads].mean()))
    return out


def analyse(system: str, args) -> tuple[dict, object, list[str], object]:
    trained = load_trained("mma", system, args)
    records, test = force_decoded(trained, args.sentences)
    config = trained.model.config
    kinds = config.encoder.head_spec if config.encoder.attention == "mma" else "G"
    labels = head_labels(kinds, config.heads)
    stats = head_distance_entropy([r.encoder_self for r in records])
    return {**describe(trained), "sentences": len(records)}, stats, labels, (records, test)


def main(argv: list[str] | None = None) -> int:
    args = analysis_parser(__doc__, dataset="de_en").parse_args(argv)
    out = output_dir(args, __file__)

    mma, mma_stats, mma_labels, (records, test) = analyse("mma", args)
    index = min(range(len(records)), key=lambda i: abs(records[i].source_length - 12))
    maps = sentence_maps(records[index], source_tokens=pieces(test.src_tokenizer, test.src[index]),
                         target_tokens=pieces(test.tgt_tokenizer, test.tgt[index]) + ["</s>"])
    save_figure(plot_sentence_attention(maps, cell=1.9)["encoder_self"], out / "mma_head_maps.png", dpi=80)
    base, base_stats, base_labels, _ = analyse("baseline", args)
    analysed = (("mma", mma, mma_stats, mma_labels), ("baseline", base, base_stats, base_labels))
    for name, about, stats, labels in analysed:
        figure = plot_distance_entropy(stats, head_labels=labels, title=f"{about['system']}: encoder self-attention")
        save_figure(figure, out / f"{name}_distance_entropy.png", dpi=80)

    lines = [f"## MMA heads after training ({args.scale} scale, {data_of('mma', args)}, seed 1)", "",
             f"Models: {models_of('main', args)}: baseline and MMA. Force-decoded the first {mma['sentences']} test "
             f"sentences (`{command_line(__file__, args)}`). Distance: attention-weighted mean |i - j| in subword "
             f"pieces; entropy of each query row in nats (MLMHA paper eqs. 13-16); averaged over layers and the heads "
             f"of a kind.", "",
             "| model | test BLEU | kind | mean distance | mean entropy |", "|---|---|---|---|---|"]
    for _, about, stats, labels in analysed:
        bleu = bleu_text(about)
        for kind, (distance, entropy) in per_kind(stats, labels).items():
            lines.append(f"| {about['system']} | {bleu} | {kind} | {distance:.2f} | {entropy:.2f} |")
    lines += ["", f"Checkpoints: `{mma['checkpoint']}`, `{base['checkpoint']}`.", "",
              "![encoder maps of one sentence](mma_head_maps.png)", "",
              "![MMA distance and entropy](mma_distance_entropy.png) "
              "![baseline distance and entropy](baseline_distance_entropy.png)"]
    path = atomic_write_text(out / "mma_heads.md", "\n".join(lines) + "\n")
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
