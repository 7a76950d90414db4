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
# Here a small LSTM model with 4 heads is trained on Multi30k De-En (German source; the paper used IWSLT'15 En-Vi,
# whose training data is not available here) with the library's own pipeline, reference translations are
# force-decoded in record mode, and we look at the per-head response by relative position, the cross-attention maps
# of one sentence, and BLEU by source length. The full preset (`MMA_NMT_NOTEBOOK_PRESET=full`) also trains the
# single-head baseline.

# %%
import time

import torch

from mma_nmt.analysis import (plot_attention_grid, plot_relative_position_response, relative_position_response)
from mma_nmt.demos.notebook_figures import figure_dir, figure_shower, show_bleu_by_source_length
from mma_nmt.demos.notebook_models import (cache_dir, greedy_translations, notebook_run, notebook_scale,
                                          train_or_load)
from mma_nmt.evaluation.force_decode import force_decode_sentences, pieces

SCALE = notebook_scale()
CACHE = cache_dir()
OUT = figure_dir("02_lstm_multihead")
show = figure_shower(OUT)
torch.manual_seed(0)
started = time.time()


print(SCALE)

# %% [markdown]
# ## Train (or load) the model
# `lstm_tiny` widened to 4 heads: bidirectional 1-layer encoder, 1-layer decoder with input feeding, hidden size 128,
# `d_sm = d_fd = 64` split over the heads (16 values per head), multi-head Luong attention on the fused
# `shared_value_attention` operator.

# %%
LSTM = {"preset": "lstm_tiny", "embed_dim": 64, "hidden_size": 128, "softmax_dim": 64, "feed_dim": 64,
        "implementation": "fused"}
MODELS = {"4 heads": {**LSTM, "heads": 4}}
if SCALE.name == "full":
    MODELS["1 head"] = {**LSTM, "heads": 1}
trained = {}
for name, model_config in MODELS.items():
    trained[name] = train_or_load(notebook_run("lstm_" + name.split()[0] + "h", model_config, SCALE, CACHE))
    print(f"{name}: {trained[name].summary()}")
main = trained["4 heads"]
model, test = main.model, main.dataset("test")
heads = model.config.heads

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
# ## BLEU by source length
# Greedy translations of the first test sentences. In the tiny preset BLEU is near zero; the full preset compares
# 4 heads with 1 head.

# %%
hypotheses = greedy_translations(trained, test, SCALE.test_sentences)
for name, hyps in hypotheses.items():
    print(f"{name}: first hypothesis: {hyps[0]!r}")
show_bleu_by_source_length(show, test, hypotheses)
print(f"done in {time.time() - started:.1f} s")
