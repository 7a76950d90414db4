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
# # 04 — Multi-hop attention: which heads does the second hop keep?
#
# The multi-hop paper adds a *second hop* to one encoder self-attention layer: after ordinary multi-head attention
# (the first hop), a small network scores the H head outputs of every position, a softmax over heads turns the scores
# into a **head gate** `beta` (summing to 1 over heads), and each head's output is scaled by its gate before the
# output projection. The gate shows which heads a position relies on.
#
# The model is the best multi-hop run on disk (the `hop*` systems of `mma-nmt experiment multihop`: at the mini scale
# 6 + 2 layers on Multi30k De-En, second hop in one or more encoder layers), else the committed example model
# `examples/multihop_multi30k_de_en` (second hop in encoder layer 4 of 6, trained to patience), else a small
# Transformer with the second hop in its top encoder layer that the notebook trains on Multi30k De-En with the
# library's pipeline (what CI does).
# Reference translations are force-decoded in record mode, which hands out the first-hop weights and the head gate.
# We look at the gate per head over the corpus and per position of one sentence, the first-hop maps, and
# BLEU by source length (the full preset, `MMA_NMT_NOTEBOOK_PRESET=full`, also trains a standard baseline).

# %%
import time

import torch

from mma_nmt.analysis import (head_labels, plot_attention_grid, plot_head_gates)
from mma_nmt.analysis.attention_explorer import ExplorerBlock
from mma_nmt.demos.notebook_figures import show_attention_explorer, show_bleu_by_source_length
from mma_nmt.demos.notebook_models import NotebookModel, greedy_translations, models_for_notebook
from mma_nmt.demos.notebook_setup import start_notebook
from mma_nmt.evaluation.force_decode import force_decode_sentences, pieces

SCALE, CACHE, OUT, show, started = start_notebook("04_multihop")


print(SCALE)

# %% [markdown]
# ## Load (or train) the model
# The notebook's own model: `transformer_tiny` (d_model 128, 4 heads, 2 + 2 layers) with the second hop in encoder
# layer 2 (0-based index 1), the top one, as the paper's best placement is a high layer (4 of 6). A model with several
# second-hop layers is analysed at its first one.

# %%
HOP_SYSTEMS = ("hop1", "hop2", "hop3", "hop4", "hop5", "hop6", "hop12", "hop123", "hop1234", "hop12345", "hop123456",
               "hop23456", "hop3456", "hop456", "hop56")
MULTIHOP_TINY = {"preset": "transformer_tiny", "encoder": {"attention": "multihop", "multihop_layers": [1]}}
MODELS = {"multi-hop": NotebookModel(HOP_SYSTEMS, "multihop", MULTIHOP_TINY, example="multihop_multi30k_de_en")}
if SCALE.name == "full":
    MODELS["baseline"] = NotebookModel(("baseline",), "baseline", {"preset": "transformer_tiny"})
trained = models_for_notebook("multihop", MODELS, SCALE, CACHE)
for name, run in trained.items():
    print(f"{name}: {run.summary()}")
main = trained["multi-hop"]
model, test = main.model, main.dataset("test")
hop_layer = main.run.model.encoder.multihop_layers[0]
heads = model.config.heads

# %% [markdown]
# ## Force-decode reference translations in record mode
# Per sentence: the head gate of the multi-hop layer, (H, S) (one weight per head and source position), and the
# first-hop weights of every encoder layer.

# %%
n = SCALE.analysis_sentences
records = list(force_decode_sentences(model, test.src[:n], test.tgt[:n]))
gates = torch.cat([r.head_gate[hop_layer] for r in records], dim=1)  # (H, all source positions)
print(f"{n} sentences, {gates.shape[1]} source positions; gate rows sum to 1:",
      torch.allclose(gates.sum(0), torch.ones(gates.shape[1], dtype=gates.dtype)))

# %% [markdown]
# ## Head-gate weights per head
# Bars: the mean gate of each head over every source position of the sample, error bars one standard deviation; the
# dotted line is the uniform gate 1/H. A head the second hop keeps sits above it, a head it mutes below. The gate
# starts close to uniform (the scoring network is random); after half a minute of training, expect modest departures
# from 1/H — large, stable differences between heads are what a longer run (full preset) can show.

# %%
show(plot_head_gates(gates, title=f"Head gate of encoder layer {hop_layer + 1}, {gates.shape[1]} positions"),
     "head_gates.png")
print("mean gate per head:", [round(float(g), 3) for g in gates.mean(dim=1)], f"(uniform: {1 / heads:.3f})")
print("share of positions where each head has the largest gate:",
      [round(float(s), 3) for s in torch.bincount(gates.argmax(dim=0), minlength=heads) / gates.shape[1]])

# %% [markdown]
# ## One sentence: the gate per position and the first-hop maps
# Top: the head gate at each source position (rows: heads). Below: the first-hop weights of every encoder layer and
# head; the second hop acts only in the layer marked above, on these heads' outputs.

# %%
index = min(range(n), key=lambda i: abs(records[i].source_length - 10))
record = records[index]
tokens = pieces(test.src_tokenizer, test.src[index])
print("source:", test.src_text[index])
gate = record.head_gate[hop_layer]  # (H, S)
show(plot_attention_grid(gate.unsqueeze(0).unsqueeze(0), query_tokens=[f"head {h}" for h in range(heads)],
                         key_tokens=tokens, head_names=["gate"],
                         layer_names=[f"layer {hop_layer + 1}"], title="Head gate per source position (rows: heads)",
                         cell=3.2), "gate_per_position.png")
show(plot_attention_grid(record.encoder_self, query_tokens=tokens, key_tokens=tokens,
                         head_names=head_labels(None, heads), title="First-hop encoder self-attention", cell=1.9),
     "first_hop_maps.png")

# %% [markdown]
# ### Interactive view
# The first-hop maps of every layer and the head gate of each second-hop layer (block `head gate`: one row per head,
# one column per source position) for the first test sentences. Pick a sentence, block and layer; click a head to
# draw it large, hover a cell for its weight.

# %%
def gate_blocks(i, record):
    source = pieces(test.src_tokenizer, test.src[i])
    layers = sorted(record.head_gate)
    gates = torch.stack([record.head_gate[layer] for layer in layers]).unsqueeze(1)  # (layers, 1, H, S)
    return {"head gate": ExplorerBlock(gates, [f"head {h}" for h in range(heads)], source, head_names=["gate"],
                                       layer_names=[f"layer {layer + 1}" for layer in layers])}


print(show_attention_explorer(OUT, test, records, title="Multi-hop: first hop and head gates", extra=gate_blocks))

# %% [markdown]
# ## BLEU by source length

# %%
hypotheses = greedy_translations(trained, test, SCALE.test_sentences)
for name, hyps in hypotheses.items():
    print(f"{name}: first hypothesis: {hyps[0]!r}")
show_bleu_by_source_length(show, test, hypotheses)
print(f"done in {time.time() - started:.1f} s")
