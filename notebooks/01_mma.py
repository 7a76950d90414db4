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
# # 01 — Mixed multi-head self-attention (MMA): what do global, local, forward and backward heads do after training?
#
# The MMA paper gives each encoder self-attention head a hard mask: **G**lobal heads see every word, **L**ocal heads
# only `|i - j| <= 1`, **F**orward heads `j >= i` and **B**ackward heads `j <= i`. This notebook takes a Transformer
# whose encoder uses the spec `GLFB` (one of each kind, stretched over the heads), force-decodes reference
# translations in *record mode* (every attention module computes with its plain-PyTorch reference and hands out its
# weights) and looks at:
#
# 1. the attention maps of one sentence: every encoder, decoder and cross-attention head, encoder heads titled with
#    their kind, as figures and in an interactive view;
# 2. mean attention distance and entropy per head (MLMHA paper, eqs. 13-16) summarised by head kind;
# 3. BLEU by source length.
#
# **Which model.** The best one on disk: the `GLFB` systems of `mma-nmt experiment mma` (full scale first, then
# `--scale mini`), or the demo's run (`make demo`: 3 minutes). Else the converged example model committed in
# `examples/mma_multi30k_de_en` (trained to patience on Multi30k; its test BLEU is in `examples/README.md`), shown
# beside the all-global baseline of the same table, `examples/baseline_multi30k_de_en`, when that is there too.
# Only when none is there does the notebook train its own tiny model (what CI does): about half a minute on a few
# thousand sentence pairs with `MMA_NMT_NOTEBOOK_PRESET=tiny` (the default), or all of Multi30k for thousands of updates
# with `full`, which also trains an all-global baseline. `MMA_NMT_NOTEBOOK_RUNS` names another folder to search
# (`none`: train the notebook's own model whatever is on disk).

# %%
import time

import torch

from mma_nmt.analysis import (head_distance_entropy, head_labels, plot_distance_entropy, plot_sentence_attention)
from mma_nmt.demos.example_models import example_export
from mma_nmt.demos.notebook_figures import show_attention_explorer, show_bleu_by_source_length
from mma_nmt.demos.notebook_models import MMA_TINY, NotebookModel, greedy_translations, models_for_notebook
from mma_nmt.demos.notebook_setup import start_notebook
from mma_nmt.evaluation.force_decode import force_decode_sentences, pieces, sentence_maps

SCALE, CACHE, OUT, show, started = start_notebook("01_mma")


print(SCALE)

# %% [markdown]
# ## Load (or train) the model

# %%
MODELS = {"MMA GLFB": NotebookModel(("mma", "mma_seed2", "mma_seed3", "mma_to_patience"), "mma", MMA_TINY,
                                    example="mma_multi30k_de_en")}
if SCALE.name == "full" or example_export("baseline_multi30k_de_en") is not None:
    MODELS["baseline GGGG"] = NotebookModel(("baseline", "baseline_to_patience"), "baseline",
                                            {"preset": "transformer_tiny"}, example="baseline_multi30k_de_en")
trained = models_for_notebook("mma", MODELS, SCALE, CACHE, demo=True)
for name, run in trained.items():
    print(f"{name}: {run.summary()}")
mma = trained["MMA GLFB"]
model, test = mma.model, mma.dataset("test")
kinds = mma.run.model.encoder.head_spec
labels = head_labels(kinds, model.config.heads)
print("encoder heads:", labels)

# %% [markdown]
# ## Force-decode reference translations in record mode
# `force_decode_sentences` feeds `BOS + reference` to the decoder and yields, per sentence, every layer's weights cut
# to the true lengths: encoder self-attention (L, H, S, S), decoder self-attention (L, H, T, T) and cross-attention
# (L, H, T, S), plus the head kinds of each encoder layer.

# %%
n = SCALE.analysis_sentences
records = list(force_decode_sentences(model, test.src[:n], test.tgt[:n]))
print(f"{len(records)} test sentences force-decoded; encoder head kinds per layer: {records[0].encoder_head_kinds}")

# %% [markdown]
# ## Attention maps of one sentence
# Rows are queries, columns keys. Decoder positions are labelled by the token each one predicts (the last row
# predicts `</s>`). What to look for: the masks of the L, F and B heads are exact by construction (zeros outside them);
# the interesting question is *inside* the masks — does the global head spread its weight or pick a few words, does
# the forward head look at the next word or at the end of the sentence? A model trained for half a minute (the
# notebook's own tiny model) has only begun to move away from near-uniform weights, so expect soft maps from it; the
# experiment's and the demo's models show sharper heads.

# %%
index = min(range(len(records)), key=lambda i: abs(records[i].source_length - 10))  # a sentence of about 10 pieces
record = records[index]
maps = sentence_maps(record, source_tokens=pieces(test.src_tokenizer, test.src[index]),
                     target_tokens=pieces(test.tgt_tokenizer, test.tgt[index]) + ["</s>"])
print("source:", test.src_text[index])
print("reference:", test.tgt_text[index])
for block, figure in plot_sentence_attention(maps, cell=1.9).items():
    show(figure, f"maps_{block}.png")

# %% [markdown]
# ### The same maps, interactive
# Pick a sentence, a block and a layer; click a head to draw it large, hover a cell for its weight. Encoder heads are
# labelled with their kind (`2 L`: head 2 is local). The view is also written to `attention_explorer.html` beside the
# figures (it opens in any browser, offline).

# %%
print(show_attention_explorer(OUT, test, records, title="MMA GLFB: attention of the force-decoded test sentences"))

# %% [markdown]
# ## Mean attention distance and entropy per head
# Distance: the attention-weighted mean of `|i - j|` (in subword pieces); entropy: of each query row, in nats
# (MLMHA paper, eqs. 13-16), over every force-decoded sentence. By construction a local head (window 1) has distance
# below 1 and entropy below log 3 = 1.10; forward and backward heads see on average half the sentence. Training shows
# up as a *lower entropy than the mask allows* (a head concentrating) and as global heads whose distance moves away
# from the mean distance of a uniform row.

# %%
stats = head_distance_entropy([r.encoder_self for r in records])
show(plot_distance_entropy(stats, head_labels=labels, title="Encoder self-attention: " + kinds), "distance_entropy.png")
uniform = head_distance_entropy([torch.ones_like(r.encoder_self[:, :1]) / r.source_length for r in records])
print(f"uniform rows over the same sentences: distance {uniform.distance.mean():.2f}, "
      f"entropy {uniform.entropy.mean():.2f}")
print("kind | mean distance | mean entropy   (averaged over layers and the heads of that kind)")
for letter in "GLFB":
    heads = [h for h, label in enumerate(labels) if label.endswith(letter)]
    print(f"  {letter}  | {stats.distance[:, heads].mean():13.2f} | {stats.entropy[:, heads].mean():12.2f}")

# %% [markdown]
# ## BLEU by source length
# Greedy translations of the first test sentences, sacreBLEU per source-length bucket (words). With the notebook's
# own tiny model BLEU is a few points at most and the buckets hold few sentences: the figure shows the analysis works
# end to end, not how MMA compares with a baseline (the experiment's tables do that).

# %%
hypotheses = greedy_translations(trained, test, SCALE.test_sentences)
for name, hyps in hypotheses.items():
    print(f"{name}: first hypothesis: {hyps[0]!r}")
show_bleu_by_source_length(show, test, hypotheses)
print(f"done in {time.time() - started:.1f} s")
