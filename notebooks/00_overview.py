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
# # 00 — Overview: what mixed heads may see, and how an untrained layer spreads its weights
#
# This notebook uses only what is on `main` today: the fused operator `mma_nmt.ops.fused_attention`, the module
# `mma_nmt.modules.MixedMultiheadAttention`, the plain-PyTorch formulas in `mma_nmt.reference`, and the analysis
# functions of `mma_nmt.analysis`, on real German sentences from Multi30k (`../shared/data/multi30k/val.de.gz`).
#
# **The attention layer of the first part is untrained**: its projections are freshly initialised and the word
# embeddings are random vectors plus sinusoidal positions. Those pictures show what each head *kind* allows (its mask)
# and how a random layer spreads weight inside that mask. The last part repeats the analyses on a **trained** MMA
# Transformer: the best one on disk (the `GLFB` runs of `mma-nmt experiment mma`, or the demo's run of `make demo`),
# else the converged example model committed in `examples/mma_multi30k_de_en`, else the tiny model that `01_mma.py`
# trains too (trained here in about half a minute and shared through the cache).
# The per-paper notebooks (`01_mma.py` to `05_gmm.py`, see `notebooks/README.md`) go further.
#
# `MMA_NMT_NOTEBOOK_PRESET=tiny` (the default, used by the tests) runs on a dozen sentences; `full` reads 500.

# %%
import os
import sys
import time

import torch

import mma_nmt
from mma_nmt.analysis import (head_distance_entropy, head_labels, plot_attention_grid, plot_distance_entropy,
                              plot_relative_position_response, relative_position_response)
from mma_nmt.demos.mixed_attention_maps import embed, find_multi30k, read_sentences
from mma_nmt.demos.notebook_setup import start_notebook
from mma_nmt.modules import MixedAttentionConfig, MixedMultiheadAttention
from mma_nmt.ops import format_head_spec, fused_attention, padding_mask_from_lengths
from mma_nmt.reference import attention_reference, visibility_mask

PRESET = os.environ.get("MMA_NMT_NOTEBOOK_PRESET", "tiny")
SENTENCES = {"tiny": 12, "full": 500}[PRESET]
SCALE, CACHE, OUT, show, started = start_notebook("00_overview")


print(f"preset={PRESET}, sentences={SENTENCES}, python={sys.executable}")
print("mma_nmt build:", mma_nmt.build_info())

# %% [markdown]
# ## Real sentences, random embeddings
# `read_sentences` splits each line into words and punctuation; `embed` gives each word a random vector plus a
# sinusoidal position encoding.

# %%
sentences = read_sentences(find_multi30k() / "val.de.gz", SENTENCES)
x, lengths = embed(sentences, 64)
print(f"{len(sentences)} sentences, lengths {int(lengths.min())}..{int(lengths.max())}")
print("first:", " ".join(sentences[0]))

# %% [markdown]
# ## The fused operator on its own
# `fused_attention` takes (batch, heads, length, head_dim) tensors and a head spec; `return_probs=True` also returns
# the weights for analysis. Every real query row sums to 1, and the result matches the plain-PyTorch reference.

# %%
q = k = v = torch.randn(len(sentences), 4, x.shape[1], 16, dtype=torch.float64)
result = fused_attention(q, k, v, head_kinds="GLFB", window=1, key_lengths=lengths, return_probs=True)
ref_out, ref_probs = attention_reference(q, k, v, head_kinds=[0, 1, 2, 3], key_lengths=lengths, window=1)
row_sums = result.probs[0, :, : lengths[0], : lengths[0]].sum(-1)
print("max |fused - reference| output :", (result.out - ref_out).abs().max().item())
print("max |fused - reference| weights:", (result.probs - ref_probs).abs().max().item())
print("row sums of sentence 0 (should all be 1):", row_sums.min().item(), row_sums.max().item())

# %% [markdown]
# ## An untrained mixed-head layer: 8 heads `GGLLFFBB`, local window 1
# Heads 0-1 are global (see every word), 2-3 local (|i - j| <= 1), 4-5 forward (j >= i) and 6-7 backward (j <= i).

# %%
config = MixedAttentionConfig(embed_dim=64, num_heads=8, head_spec="GLFB", window=1)
layer = MixedMultiheadAttention(config).eval()
with torch.no_grad():
    _, weights = layer(x, key_padding_mask=padding_mask_from_lengths(lengths, x.shape[1]), need_weights=True)
print("weights:", tuple(weights.shape), "(batch, heads, query, key); heads:", format_head_spec(layer.head_kinds))
labels = head_labels("GLFB", 8)

# %% [markdown]
# ### Masks and weights of one sentence
# Top row: the mask of each head kind (yellow = visible). Bottom row: the weights of the untrained layer. Weights stay
# inside each mask; inside it they are close to uniform, as expected before training.

# %%
index = int(lengths[: min(6, len(sentences))].argmax())
n = int(lengths[index])
words = sentences[index]
masks = visibility_mask(layer.head_kinds, n, n, window=1)[0].float()  # (H, n, n)
grid = torch.stack([masks, weights[index, :, :n, :n]])  # (2, H, n, n): row 0 masks, row 1 weights
show(plot_attention_grid(grid, query_tokens=words, key_tokens=words, head_names=labels,
                         layer_names=["mask", "weights"], title=" ".join(words), cell=1.9), "masks_and_weights.png")

# %% [markdown]
# ## Mean attention distance and entropy per head (MLMHA paper, eqs. 13-16)
# Computed over every sentence of the sample, each cut to its true length.

# %%
per_sentence = [weights[b, :, : int(lengths[b]), : int(lengths[b])] for b in range(len(sentences))]
stats = head_distance_entropy(per_sentence)
show(plot_distance_entropy(stats, head_labels=labels), "distance_entropy.png")
print(f"{stats.sentences} sentences, {stats.tokens} tokens")
print("kind | mean distance | mean entropy")
for letter in "GLFB":
    heads = [h for h, name in enumerate(labels) if name.endswith(letter)]
    print(f"  {letter}  | {stats.distance[0, heads].mean():13.2f} | {stats.entropy[0, heads].mean():12.2f}")

# %% [markdown]
# Reading the numbers: local heads can look at most one word away, so their mean distance is below 1 and their entropy
# below log 3. Forward and backward heads see about half the sentence: shorter distances and lower entropy than global
# heads. For an untrained layer the weights are near-uniform inside each mask, so these numbers mostly measure the
# masks; training is what would make some global heads concentrate (low entropy) on far words (large distance).

# %% [markdown]
# ## Response by relative position (LSTM multi-head paper's analysis, applied to self-attention)
# Summing each head's weights by offset j - i shows the masks from another angle: forward heads only respond at
# offsets >= 0, backward heads at <= 0, local heads at -1, 0, 1.

# %%
response = relative_position_response(per_sentence)
show(plot_relative_position_response(response, head_labels=labels, window=8), "relative_position.png")
print("peak offset per head:", dict(zip(labels, response.peak_offsets().tolist())))

# %% [markdown]
# ## After training: an MMA encoder's heads
# The same distance and entropy per head kind for the encoder of a trained MMA Transformer (heads `GLFB`, window 1),
# over the same number of test sentences, force-decoded in record mode. Training is what separates heads of one
# kind: compare each kind's numbers with those of the untrained layer above, and look at the maps in the
# interactive view below.

# %%
from mma_nmt.demos.notebook_figures import show_attention_explorer
from mma_nmt.demos.notebook_models import MMA_TINY, NotebookModel, models_for_notebook
from mma_nmt.evaluation.force_decode import force_decode_sentences

MMA_SYSTEMS = ("mma", "mma_seed2", "mma_seed3", "mma_to_patience")
mma = models_for_notebook("mma", {"MMA": NotebookModel(MMA_SYSTEMS, "mma", MMA_TINY, example="mma_multi30k_de_en")},
                          SCALE, CACHE, demo=True)["MMA"]
print("trained model:", mma.summary())
test = mma.dataset("test")
records = list(force_decode_sentences(mma.model, test.src[:SENTENCES], test.tgt[:SENTENCES]))
trained_labels = head_labels(mma.run.model.encoder.head_spec, mma.model.config.heads)
trained_stats = head_distance_entropy([r.encoder_self for r in records])
show(plot_distance_entropy(trained_stats, head_labels=trained_labels, title="Trained MMA encoder"),
     "trained_distance_entropy.png")
print("kind | untrained distance | trained distance | untrained entropy | trained entropy")
for letter in "GLFB":
    before = [h for h, name in enumerate(labels) if name.endswith(letter)]
    after = [h for h, name in enumerate(trained_labels) if name.endswith(letter)]
    print(f"  {letter}  | {stats.distance[0, before].mean():18.2f} | {trained_stats.distance[:, after].mean():16.2f} | "
          f"{stats.entropy[0, before].mean():17.2f} | {trained_stats.entropy[:, after].mean():15.2f}")

# %% [markdown]
# ### Interactive view of the trained model's attention
# Pick a sentence, a block (encoder self-, decoder self-, cross-attention) and a layer; click a head to draw it large
# and hover a cell for its weight. Encoder heads carry their kind in their label.

# %%
print(show_attention_explorer(OUT, test, records, title="Trained MMA Transformer: force-decoded test sentences"))
print(f"done in {time.time() - started:.1f} s")
