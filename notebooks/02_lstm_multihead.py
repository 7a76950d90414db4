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
# # 02 — Multi-head Luong attention in an LSTM encoder-decoder: do the heads look at different places?
#
# The LSTM multi-head paper gives the decoder of a Luong-style LSTM model `h` attention heads, each with its own score
# matrix `W_sc_i` over the same encoder states, and asks whether the heads specialise. Its analysis (section 6) sums
# each head's attention weights by *relative source position* over a corpus: a head that follows the diagonal peaks at
# offset 0, a head that reads ahead peaks at positive offsets.
#
# Here a multi-head LSTM model is loaded — the best run of `mma-nmt experiment lstm_multihead` on disk (Multi30k
# En-De at the mini scale; the paper used IWSLT'15 En-Vi, whose training data is not available here) — else the
# committed example model `examples/lstm_h4_multi30k_en_de` (4 heads, Multi30k En-De, trained to patience), else a
# small 4-head model the notebook trains on Multi30k De-En with the library's own pipeline (what CI does; about half
# a minute). Reference translations are force-decoded in record mode, and we look at the per-head response by
# relative position, the cross-attention maps of one sentence (also interactively), and BLEU by source length. The
# full preset (`MMA_NMT_NOTEBOOK_PRESET=full`) also trains the single-head baseline.

# %%
import time


from mma_nmt.analysis import (plot_attention_grid, plot_relative_position_response, relative_position_response)
from mma_nmt.demos.notebook_figures import show_attention_explorer, show_bleu_by_source_length
from mma_nmt.demos.notebook_models import NotebookModel, greedy_translations, models_for_notebook
from mma_nmt.demos.notebook_setup import start_notebook
from mma_nmt.evaluation.force_decode import force_decode_sentences, pieces

SCALE, CACHE, OUT, show, started = start_notebook("02_lstm_multihead")


print(SCALE)

# %% [markdown]
# ## Load (or train) the model
# The best multi-head LSTM on disk: the systems `h2` to `h10` of `mma-nmt experiment lstm_multihead` (full scale
# first, then mini: `lstm_mini` on Multi30k En-De). Without one, the notebook trains its own: `lstm_tiny` widened to
# 4 heads: bidirectional 1-layer encoder, 1-layer decoder with input feeding, hidden size 128, `d_sm = d_fd = 64`
# split over the heads (16 values per head), multi-head Luong attention on the fused `shared_value_attention`
# operator. The full preset adds the single-head baseline.

# %%
LSTM = {"preset": "lstm_tiny", "embed_dim": 64, "hidden_size": 128, "softmax_dim": 64, "feed_dim": 64,
        "implementation": "fused"}
MODELS = {"multi-head": NotebookModel(("h2", "h4", "h6", "h8", "h10"), "lstm_4h", {**LSTM, "heads": 4},
                                     example="lstm_h4_multi30k_en_de")}
if SCALE.name == "full":
    MODELS["1 head"] = NotebookModel(("h1",), "lstm_1h", {**LSTM, "heads": 1})
trained = models_for_notebook("lstm_multihead", MODELS, SCALE, CACHE)
for name, run in trained.items():
    print(f"{name}: {run.summary()}")
main = trained["multi-head"]
model, test = main.model, main.dataset("test")
heads = model.config.heads
print(f"{heads} heads; source language {test.meta['corpus']['src_lang']}, target {test.meta['corpus']['tgt_lang']}")

# %% [markdown]
# ## Force-decode reference translations in record mode
# The LSTM decoder calls its attention once per target step; record mode stacks the steps, so each sentence has
# cross-attention weights (1, h, T, S): one "layer", `h` heads, one row per decoder step.

# %%
n = SCALE.analysis_sentences
records = list(force_decode_sentences(model, test.src[:n], test.tgt[:n]))
print(f"{len(records)} sentences; cross-attention of the first: {tuple(records[0].cross.shape)} (layers, heads, T, S)")

# %% [markdown]
# ## Per-head response by relative source position (the paper's Figure 1)
# For each head, the attention weights summed over every (target step `t`, source position `s`) with the same offset
# `s - t`, normalised per head. German and English have similar word order in these short captions, so heads that
# learned to track the source should peak near offset 0. What to look for: do the four curves differ (peaks at
# different offsets, broader or narrower)? After half a minute of training the response is mostly shaped by sentence
# lengths (short offsets occur in more pairs), so compare it with the *mean weight per pair* printed below, which
# removes that effect.

# %%
response = relative_position_response([r.cross[0] for r in records])
head_names = [f"head {h}" for h in range(heads)]
show(plot_relative_position_response(response, head_labels=head_names, window=10), "relative_position.png")
print("peak offset per head (summed response):", dict(zip(head_names, response.peak_offsets().tolist())))
per_pair = response.mean_per_pair()
near = response.offsets.abs() <= 10
print("offset of the largest mean weight per (t, s) pair:",
      dict(zip(head_names, response.offsets[near][per_pair[:, near].argmax(dim=1)].tolist())))

# %% [markdown]
# ## Cross-attention of one sentence, head by head
# Each panel is one head: rows are target steps (labelled by the token predicted), columns source pieces.

# %%
index = min(range(len(records)), key=lambda i: abs(records[i].source_length - 10))
target_tokens = pieces(test.tgt_tokenizer, test.tgt[index]) + ["</s>"]
print("source:", test.src_text[index])
print("reference:", test.tgt_text[index])
show(plot_attention_grid(records[index].cross, query_tokens=target_tokens,
                         key_tokens=pieces(test.src_tokenizer, test.src[index]), head_names=head_names,
                         layer_names=["Luong"], title="Multi-head Luong attention", cell=2.2), "cross_maps.png")

# %% [markdown]
# ### Interactive view
# Every head's cross-attention for the first test sentences: pick a sentence, click a head to draw it large, hover a
# cell for its weight.

# %%
print(show_attention_explorer(OUT, test, records, title="Multi-head Luong attention of the force-decoded sentences"))

# %% [markdown]
# ## BLEU by source length
# Greedy translations of the first test sentences. With the notebook's own tiny model BLEU is near zero; the full
# preset compares the multi-head model with 1 head.

# %%
hypotheses = greedy_translations(trained, test, SCALE.test_sentences)
for name, hyps in hypotheses.items():
    print(f"{name}: first hypothesis: {hyps[0]!r}")
show_bleu_by_source_length(show, test, hypotheses)
print(f"done in {time.time() - started:.1f} s")
