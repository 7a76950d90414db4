"""GMM's key analysis on the trained models of the main table: the mixture components, the gate per layer, the entropy
of each kind of attention (paper Table 6) and the alignment quality against the RWTH gold alignments (paper Table 7).

For the proposed system ("ours") and the baseline of every seed trained so far, writes next to the table:

- ``analysis/gmm_components.png``: the Gaussian components (mean +- sigma, shade = weight) of every head of the last
  decoder layer for one test sentence, over the total attention, with the gate of each target step (the first seed
  whose model is on the machine);
- ``analysis/gmm_gates.png``: the distribution of the gate g (weight of the mixture) per decoder layer (that seed);
- ``analysis/gmm_analysis.md``: the alignment error rate, precision and recall of each model on the 508 RWTH
  German-English gold sentence pairs (force-decoded English -> German, heads averaged, arg-max source word per target
  word), per decoder layer and seed; and the entropy of dot-product, mixture and total attention by source length
  (that seed);
- ``analysis/gmm_alignment_rows.json``: the alignment rows; those of seeds whose models are not on the machine are kept
  from an earlier run there (on a machine that had them), so the report spans every seed analysed anywhere.

    python experiments/gmm/analysis.py --scale mini           # after `mma-nmt experiment gmm --table main --scale mini`
"""

from __future__ import annotations

import argparse

import torch

from mma_nmt.analysis import (align_with_model, diagonal_scores, entropy_by_source_length, gate_distribution,
                              plot_gate_distribution, plot_gmm_components, read_gold_alignments)
from mma_nmt.analysis._figures import save_figure
from mma_nmt.data.corpora import default_data_dir
from mma_nmt.data.fileio import atomic_write_text
from mma_nmt.evaluation.force_decode import alignment_attention_fn, pieces
from mma_nmt.experiments.analysis_cli import (CONVERGED_SUFFIX, analysis_parser, bleu_text, command_line, data_of,
                                              describe, elsewhere_note, force_decoded, mean_sd, missing_models_note,
                                              models_of, output_dir, seed_text, trained_seeds,
                                              with_rows_measured_elsewhere)

# Source-length buckets in subword pieces. The paper's (words: up to 20, 21-40, over 40) would leave Multi30k's short
# captions almost all in the first bucket, so the mini analysis splits where its test set has sentences.
BUCKETS = ((1, 12), (13, 20), (21, None))


def memoized(attention_fn):
    """``attention_fn`` computed once per sentence pair (every decoder layer is scored from the same pass)."""
    memo = {}

    def call(source: list[str], target: list[str]):
        key = (tuple(source), tuple(target))
        if key not in memo:
            memo[key] = attention_fn(source, target)
        return memo[key]

    return call


def alignment_rows(trained, gold) -> list[dict]:
    """AER, precision and recall (percent) of every decoder layer of one model on the gold pairs (English source)."""
    test = trained.dataset()
    attention = memoized(alignment_attention_fn(trained.model, test.src_tokenizer, test.tgt_tokenizer))
    layers = len(trained.model.decoder_layers)
    rows = []
    for layer in range(layers):
        scores = align_with_model(attention, gold, source_language="en", layer=layer)
        rows.append({**describe(trained), "layer": layer + 1, "layers": layers, "aer": 100 * scores.aer,
                     "precision": 100 * scores.precision, "recall": 100 * scores.recall})
    return rows


def entropy_samples(records, *, gmm: bool) -> list[dict[str, torch.Tensor]]:
    """Per sentence: (L, H, T, S) weights of each attention kind (dot / mixture / total for GMM, dot for the
    baseline)."""
    if not gmm:
        return [{"dot": r.cross} for r in records]
    kinds = {"dot": "alpha", "mixture": "beta", "total": "gamma"}
    return [{kind: torch.stack([r.gmm[layer][name] for layer in sorted(r.gmm)]) for kind, name in kinds.items()}
            for r in records]


def components_figure(trained, records, test, out) -> None:
    index = min(range(len(records)), key=lambda i: abs(records[i].source_length - 10))
    record = records[index]
    last = max(record.gmm)
    values = record.gmm[last]
    figure = plot_gmm_components(values["omega"], values["mu"], values["sigma"], gate=values["gate"],
                                 background=values["gamma"],
                                 source_tokens=pieces(test.src_tokenizer, test.src[index]),
                                 target_tokens=pieces(test.tgt_tokenizer, test.tgt[index]) + ["</s>"],
                                 title=f"ours (seed {trained.cell.seed}), decoder layer {last + 1}: Gaussian "
                                       f"components (colour = component, shade = weight) over the total attention")
    save_figure(figure, out / "gmm_components.png", dpi=80)


def gates_figure(trained, records, out) -> list[float]:
    gates = gate_distribution(torch.stack([r.gmm[layer]["gate"] for layer in sorted(r.gmm)]) for r in records)
    figure = plot_gate_distribution(gates, title=f"ours (seed {trained.cell.seed}): gate g (weight of the mixture) "
                                                 f"per decoder layer, {len(records)} test sentences")
    save_figure(figure, out / "gmm_gates.png", dpi=80)
    return gates.means.tolist()


def diagonal_lines(gold) -> list[str]:
    """The trivial diagonal aligner's row (no model; one link per German word, as the models' arg-max) and what it
    means for the models' rates."""
    diagonal = diagonal_scores(gold, source_language="en")
    return [f"| diagonal (no model) | – | – | – | {100 * diagonal.aer:.2f} | {100 * diagonal.precision:.2f} | "
            f"{100 * diagonal.recall:.2f} |", "",
            "The last row is no model: each German word linked to the English word under its relative position "
            "(`mma_nmt.analysis.diagonal_scores`). A model whose AER is above it aligns words worse than their "
            "position alone. The extraction itself (1-based gold links, English source swapped back to German-English, "
            "source pieces summed into words, heads averaged, the chosen layer, row t the one predicting target piece "
            "t) is checked on cases whose alignment is known (`tests/python/analysis/test_analysis_alignment.py::"
            "test_extraction_recovers_a_known_alignment_through_real_subwords`, "
            "`::test_a_models_attention_rows_line_up_with_the_words_they_predict`), so rates above the diagonal are "
            "the models' attention, not the extraction: these small Multi30k models, read on Europarl, align words no "
            "better than their position does, so their AER cannot show the paper's Table 7 difference either way."]


def report(args, gold, alignments: dict[str, list[dict]], missing: dict[str, list], entropy: dict,
           gate_means: list[float], sentences: int, seeds: dict[str, int | None]) -> str:
    sure = sum(len(pair.sure) for pair in gold)
    possible_only = sum(len(pair.possible - pair.sure) for pair in gold)
    lines = [f"## GMM analysis ({args.scale} scale, {data_of('gmm', args)})", "",
             f"`{command_line(__file__, args)}`. Models: {models_of('main', args)}: baseline and "
             f"proposed system (\"ours\"), every seed whose model is on this machine."
             + missing_models_note(missing), "",
             "### Alignment quality (paper Table 7)", "",
             f"RWTH German-English gold alignments ({len(gold)} Europarl sentence pairs, {sure:,} sure / "
             f"{possible_only:,} possible links), force-decoded English -> German (the direction the models "
             "translate); each target word aligned to the source word with the largest attention, heads averaged, "
             "pieces summed into words. The paper reads the penultimate of its six decoder layers; every layer of "
             "ours is shown. Europarl is far from Multi30k's image captions, so the absolute rates say little; the "
             "comparison between the models is the point.", "",
             "| model | seed | test BLEU | decoder layer | AER (%) | precision (%) | recall (%) |",
             "|---|---|---|---|---|---|---|"]
    for rows in alignments.values():
        for row in rows:
            lines.append(f"| {row['system']} | {seed_text(row)} | {bleu_text(row)} | {row['layer']} of {row['layers']} "
                         f"| {row['aer']:.2f} | {row['precision']:.2f} | {row['recall']:.2f} |")
    lines += diagonal_lines(gold)
    lines += elsewhere_note(sum(alignments.values(), []))
    lines += ["", "Mean ± sd over seeds:", "", "| model | decoder layer | AER (%) | precision (%) | recall (%) |",
              "|---|---|---|---|---|"]
    for system, rows in alignments.items():
        for layer in sorted({row["layer"] for row in rows}):
            at = [row for row in rows if row["layer"] == layer]
            lines.append(f"| {system} | {layer} | " + " | ".join(mean_sd([row[key] for row in at])
                                                                 for key in ("aer", "precision", "recall")) + " |")
    lines += ["", f"### Entropy of the attention by source length (paper Table 6; first {sentences} test "
              f"sentences)", "",
              "Mean entropy (nats) of every (layer, head, target token) row; mixture rows are divided by their sum "
              "first. Buckets in source subword pieces (Multi30k's captions are short: the paper's buckets of 20 and "
              "40 words would leave almost every sentence in the first).", ""]
    for system, result in entropy.items():
        sizes = ", ".join(f"{label}: {count}" for label, count in zip(result.buckets, result.sentences_per_bucket))
        lines += [f"**{system}**, seed {seeds[system]} (sentences per bucket: {sizes})", "", result.table(), ""]
    lines += ["### Gate", "", f"Mean gate g (weight of the mixture) per decoder layer, seed {seeds['ours']}: "
              + ", ".join(f"layer {i + 1}: {g:.3f}" for i, g in enumerate(gate_means)) + ".", "",
              "![gate per layer](gmm_gates.png)", "", "![components of one sentence](gmm_components.png)"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = analysis_parser(__doc__, dataset="en_de")
    parser.add_argument("--gold", help="RWTH gold alignment folder (default: <data dir>/rwth_deen_alignment)")
    parser.add_argument("--gold-sentences", type=int, default=0, help="score only the first N gold pairs (0: all)")
    args: argparse.Namespace = parser.parse_args(argv)
    out = output_dir(args, __file__)
    gold = read_gold_alignments(args.gold or default_data_dir() / "rwth_deen_alignment")
    gold = gold[:args.gold_sentences] if args.gold_sentences else gold

    alignments, missing, entropy = {}, {}, {}
    gate_means, sentences, seeds = [], 0, {}
    for system in ("baseline", "ours"):
        models, missing[system] = trained_seeds("gmm", "main", system, args)
        alignments[system] = [row for trained in models for row in alignment_rows(trained, gold)]
        seeds[system] = models[0].cell.seed  # the entropy and the figures read this seed's model
        records, test = force_decoded(models[0], args.sentences)
        sentences = len(records)
        entropy[system] = entropy_by_source_length(entropy_samples(records, gmm=system == "ours"), buckets=BUCKETS)
        if system == "ours":
            components_figure(models[0], records, test, out)
            gate_means = gates_figure(models[0], records, out)
    kept = with_rows_measured_elsewhere(out / "gmm_alignment_rows.json", sum(alignments.values(), []), "gmm", "main",
                                        missing, args)
    alignments = {system: [row for row in kept if row["system"] in (system, system + CONVERGED_SUFFIX)]
                  for system in alignments}
    text = report(args, gold, alignments, missing, entropy, gate_means, sentences, seeds)
    path = atomic_write_text(out / "gmm_analysis.md", text)
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
