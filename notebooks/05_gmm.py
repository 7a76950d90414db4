# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 05 — Gaussian-mixture concentrated cross-attention (GMM): gate, entropy, alignment, n-gram precision
#
# The GMM paper mixes each cross-attention head's dot-product weights `alpha` with a K-component Gaussian mixture
# `beta` over source positions, predicted from the query: `gamma = (1 - g) alpha + g beta` with a learned gate `g`.
# Its analyses (section 6), all reproduced here on a GMM Transformer (K = 4, approximate normalisation, every decoder
# layer) and a standard baseline: the best runs on disk of `mma-nmt experiment gmm` (systems `ours` and `baseline`;
# at the mini scale 2 + 2 layers on Multi30k En-De), else the committed example model `examples/gmm_multi30k_en_de`
# (the GMM system trained to patience on Multi30k En-De; there is no baseline example, so the comparison with the
# baseline is skipped), else two small models the notebook trains on Multi30k De-En with the library's pipeline (what
# CI does):
#
# 1. the mixture components of one sentence drawn over the source (means and widths, shaded by weight);
# 2. the gate distribution per decoder layer (Figure 5);
# 3. the entropy of dot-product, mixture and total attention by source length (Table 6);
# 4. alignment error rate, precision and recall against the RWTH German-English gold alignments (Table 7):
#    force-decode the reference, average the heads of one layer, take the arg-max source word of each target word;
# 5. the n-gram precision gap to the baseline (Figure 6) and BLEU by source length (Figure 7).
#
# The notebook's own models (tiny preset, the default) train for about half a minute each and a few dozen gold pairs
# are scored; `MMA_NMT_NOTEBOOK_PRESET=full` trains on all of Multi30k and scores all 508 pairs.

# %%
import time

import torch

from mma_nmt.analysis import (align_with_model, diagonal_scores, entropy_by_source_length,
                              gate_distribution, ngram_precision_gap, ngram_precisions, plot_entropy_by_source_length,
                              plot_gate_distribution, plot_gmm_components, plot_ngram_precision_gap,
                              read_gold_alignments)
from mma_nmt.analysis.attention_explorer import ExplorerBlock
from mma_nmt.data.corpora import default_data_dir
from mma_nmt.demos.notebook_figures import show_attention_explorer, show_bleu_by_source_length
from mma_nmt.demos.notebook_models import NotebookModel, greedy_translations, models_for_notebook
from mma_nmt.demos.notebook_setup import start_notebook
from mma_nmt.evaluation.force_decode import alignment_attention_fn, encode_words, force_decode_sentences, pieces

SCALE, CACHE, OUT, show, started = start_notebook("05_gmm")


print(SCALE)

# %% [markdown]
# ## Load (or train) the two models
# The notebook's own models are both `transformer_tiny` (d_model 128, 4 heads, 2 + 2 layers); the GMM model replaces
# every decoder cross-attention with GMM attention, K = 4 components, approximate normalisation (the paper's main
# method). Only runs between German and English are taken (the alignment gold standard is German-English), in either
# direction.

# %%
GMM_TINY = {"preset": "transformer_tiny",
            "decoder": {"cross_attention": "gmm", "gmm_variant": "approximate", "gmm_components": 4}}
MODELS = {"GMM": NotebookModel(("ours",), "gmm", GMM_TINY, example="gmm_multi30k_en_de"),
          "baseline": NotebookModel(("baseline",), "baseline", {"preset": "transformer_tiny"}, optional=True)}
trained = models_for_notebook("gmm", MODELS, SCALE, CACHE, languages={"de", "en"})
for name, run in trained.items():
    print(f"{name}: {run.summary()}")
gmm, test = trained["GMM"].model, trained["GMM"].dataset("test")
source_language = test.meta["corpus"]["src_lang"]
layers = gmm.config.decoder.layers

# %% [markdown]
# ## Force-decode reference translations in record mode
# For every GMM layer record mode hands out `alpha`, `beta`, `gamma` (H, T, S), the gate (H, T) and the components
# `omega`, `mu`, `sigma` (H, T, K), in source positions.

# %%
n = SCALE.analysis_sentences
records = list(force_decode_sentences(gmm, test.src[:n], test.tgt[:n]))
print(f"{n} sentences; GMM layers: {sorted(records[0].gmm)}; components of layer 1:",
      tuple(records[0].gmm[0]["mu"].shape), "(heads, T, K)")

# %% [markdown]
# ## The mixture components of one sentence
# One panel per head of the top decoder layer; each row is a target step, each coloured bar a component (dot: mean
# `mu`, bar: `mu +- sigma`), darker for a larger weight `omega`; the grey background is the total attention `gamma`,
# and `g` the gate. What to look for: components that move right as the translation proceeds (a monotone alignment)
# and narrow widths. A model trained for seconds has not learned that yet: its means sit where the random predictor
# put them, typically near the middle of the sentence.

# %%
index = min(range(n), key=lambda i: abs(records[i].source_length - 10))
record = records[index]
top = record.gmm[layers - 1]
print("source:", test.src_text[index])
print("reference:", test.tgt_text[index])
show(plot_gmm_components(top["omega"], top["mu"], top["sigma"], gate=top["gate"], background=top["gamma"],
                         source_tokens=pieces(test.src_tokenizer, test.src[index]),
                         target_tokens=pieces(test.tgt_tokenizer, test.tgt[index]) + ["</s>"]), "components.png")

# %% [markdown]
# ### Interactive view
# Every attention map of the first test sentences, plus the two parts of each GMM layer's cross-attention: the
# dot-product weights `alpha` and the mixture `beta` (block `cross-attention` is their mix `gamma`). Pick a sentence,
# block and layer; click a head to draw it large, hover a cell for its weight.

# %%
def gmm_blocks(i, record):
    source, target = pieces(test.src_tokenizer, test.src[i]), pieces(test.tgt_tokenizer, test.tgt[i]) + ["</s>"]
    gmm_layers = sorted(record.gmm)
    names = [f"layer {layer + 1}" for layer in gmm_layers]
    return {f"GMM {part}": ExplorerBlock(torch.stack([record.gmm[layer][key] for layer in gmm_layers]), target, source,
                                         layer_names=names)
            for part, key in (("dot-product alpha", "alpha"), ("mixture beta", "beta"))}


print(show_attention_explorer(OUT, test, records, title="GMM: force-decoded test sentences", extra=gmm_blocks))

# %% [markdown]
# ## Gate distribution per decoder layer (Figure 5)
# The gate is the weight of the mixture in `gamma`, one value per head and target token. With 6 decoder layers the
# paper finds a division of labour: the bottom layers lean on dot-product attention, the middle ones on the mixture,
# the top ones balance both. This model has 2 layers, and its gate starts near 0.5 (sigmoid of a small random
# output); after half a minute of training, a shift of each layer's distribution away from 0.5 is the first thing to
# expect, not a final pattern.

# %%
gates = gate_distribution(torch.stack([r.gmm[layer]["gate"] for layer in range(layers)]) for r in records)
show(plot_gate_distribution(gates), "gate_distribution.png")
print("mean gate per decoder layer:", [round(float(m), 3) for m in gates.means])

# %% [markdown]
# ## Entropy of dot-product, mixture and total attention by source length (Table 6)
# Each row of `alpha`, `beta` (divided by its sum: the approximate normalisation does not sum to exactly 1) and
# `gamma`, over every layer, head and target token. The paper's buckets (1-20, 21-40, 41+ words) do not fit Multi30k's
# short captions (13 words on average), so these buckets are 1-10, 11-15 and 16+ source words. The paper finds the
# entropy of dot-product attention rising with source length while that of the mixture stays low. Note that a
# mixture row is concentrated by construction (K narrow bumps), so a lower mixture entropy alone says little about
# training; how the dot-product and total entropies move between buckets is the more telling part.

# %%
samples = [{"dot": torch.stack([r.gmm[l]["alpha"] for l in range(layers)]),
            "mixture": torch.stack([r.gmm[l]["beta"] for l in range(layers)]),
            "total": torch.stack([r.gmm[l]["gamma"] for l in range(layers)])} for r in records]
entropy = entropy_by_source_length(samples, source_lengths=[len(s.split()) for s in test.src_text[:n]],
                                   buckets=((1, 10), (11, 15), (16, None)))
show(plot_entropy_by_source_length(entropy), "entropy_by_length.png")
print(entropy.table())

# %% [markdown]
# ## Alignment error rate against the RWTH gold alignments (Table 7)
# 508 Europarl sentence pairs with sure and possible links. Each gold pair is encoded word by word with the model's
# subword vocabulary, the English side is force-decoded, the cross-attention of one decoder layer is averaged over
# heads, mapped from pieces to words (source pieces summed, target pieces averaged) and each English word is linked
# to its arg-max German word. The paper uses the penultimate layer; with 2 decoder layers that is layer 1.
#
# Read the numbers with care: these models saw a few thousand image captions, not parliament speeches, and trained
# for seconds; Europarl words are split into many small pieces by a 1,000-piece vocabulary. In the tiny preset expect
# an AER far above the paper's, possibly worse than the trivial diagonal aligner (each English word linked to the
# German word under its relative position) printed as a reference point.

# %%
gold = read_gold_alignments(default_data_dir() / "rwth_deen_alignment")
src_tok, tgt_tok = test.src_tokenizer, test.tgt_tokenizer
limit = gmm.config.max_positions - 1


def source_target(pair):  # the gold pair in the models' direction
    return (pair.german, pair.english) if source_language == "de" else (pair.english, pair.german)


fits = [p for p in gold if max(len(encode_words(src_tok, source_target(p)[0])[0]),
                               len(encode_words(tgt_tok, source_target(p)[1])[0]) + 1) <= limit]
pairs = fits[: SCALE.gold_pairs] if SCALE.gold_pairs else fits
print(f"{len(gold)} gold pairs, {len(fits)} fit in {limit} positions, scoring {len(pairs)} "
      f"(source language: {source_language})")
for name, run in trained.items():
    scores = align_with_model(alignment_attention_fn(run.model, src_tok, tgt_tok), pairs,
                              source_language=source_language, layer=-2)
    print(f"{name:9s} layer {layers - 1}: AER {scores.aer:.3f}, precision {scores.precision:.3f}, "
          f"recall {scores.recall:.3f} ({scores.hypothesis_links} links)")
diagonal = diagonal_scores(pairs, source_language=source_language)  # one link per target word, as the models
print(f"diagonal  : AER {diagonal.aer:.3f}, precision {diagonal.precision:.3f}, recall {diagonal.recall:.3f}")

# %% [markdown]
# ## N-gram precision gap to the baseline (Figure 6) and BLEU by source length (Figure 7)
# Greedy translations of the first test sentences by both models. The gap is GMM minus baseline precision in
# percentage points per n-gram order (sacreBLEU's clipped counts). With models this small the gap is dominated by
# noise: a difference of a few points between two half-minute runs says little.

# %%
count = SCALE.test_sentences
references = test.tgt_text[:count]
hypotheses = greedy_translations(trained, test, count)
if "baseline" in hypotheses:
    gap = ngram_precision_gap(hypotheses["GMM"], hypotheses["baseline"], references)
    show(plot_ngram_precision_gap(gap), "ngram_gap.png")
else:
    print("no baseline beside the GMM example model: the n-gram precision gap is skipped")
for name, hyps in hypotheses.items():
    print(f"{name:9s} n-gram precision (%):", [round(p, 1) for p in ngram_precisions(hyps, references).precision])
show_bleu_by_source_length(show, test, hypotheses)
print(f"done in {time.time() - started:.1f} s")
