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
# # 03 — Multi-layer multi-head attention (MLMHA): which encoder layers does the decoder read?
#
# In the MLMHA paper every decoder layer attends over the outputs `f_1 .. f_n` of several encoder layers, not only the
# top one. Variant `M-11` gives each encoder layer its own attention weights and sums the contexts; `M-10`, the
# paper's proposed system in its convergence table, gives each layer its own weights and concatenates the contexts.
# The paper's analyses, reproduced here on the best `M-11` model on disk (system `m11` of `mma-nmt experiment mlmha`:
# at the mini scale 6 + 2 layers on Multi30k En-De), else on the committed example model
# `examples/mlmha_m10_multi30k_en_de` (`M-10`, 6 + 2 layers, trained to patience), else on a small `M-11` model the
# notebook trains on Multi30k De-En with the library's pipeline (what CI does). Both variants give every encoder layer
# output its own weights, which is what the maps below show:
#
# 1. mean attention distance and entropy of every encoder self-attention head and layer (its Figures 5-9; eqs. 13-16);
# 2. the cross-attention of one sentence over each encoder layer output `f_i`;
# 3. **layer masking at test time** (its Table 7): BLEU when one `f_i` is replaced by zeros where the decoder reads it.
#
# The notebook's own model (tiny preset, the default) trains for about half a minute; `MMA_NMT_NOTEBOOK_PRESET=full`
# trains on all of Multi30k and also takes a standard Transformer (the experiment's `baseline`, or one it trains) to
# compare the encoders' distance and entropy.

# %%
import time

from IPython.display import Markdown, display

from mma_nmt.analysis import (format_layer_masking_table, head_distance_entropy, layer_masking_table,
                              plot_distance_entropy, plot_layer_weights)
from mma_nmt.analysis.attention_explorer import ExplorerBlock
from mma_nmt.decoding.translate import translate_dataset
from mma_nmt.demos.notebook_figures import show_attention_explorer, show_bleu_by_source_length
from mma_nmt.demos.notebook_models import NotebookModel, greedy_translations, models_for_notebook
from mma_nmt.demos.notebook_setup import start_notebook
from mma_nmt.evaluation.force_decode import force_decode_sentences, pieces
from mma_nmt.models.layer_masking import masked_encoder_layer

SCALE, CACHE, OUT, show, started = start_notebook("03_mlmha")


print(SCALE)

# %% [markdown]
# ## Load (or train) the model
# The notebook's own model: `transformer_tiny` (d_model 128, 4 heads) with 3 encoder and 2 decoder layers; every
# decoder layer reads all three encoder layer outputs with MLMHA `M-11`.

# %%
MLMHA_TINY = {"preset": "transformer_tiny", "encoder": {"layers": 3},
              "decoder": {"cross_attention": "mlmha", "mlmha_variant": "M-11"}}
MODELS = {"MLMHA": NotebookModel(("m11",), "mlmha", MLMHA_TINY, example="mlmha_m10_multi30k_en_de")}
if SCALE.name == "full":
    MODELS["baseline"] = NotebookModel(("baseline",), "baseline",
                                       {"preset": "transformer_tiny", "encoder": {"layers": 3}})
trained = models_for_notebook("mlmha", MODELS, SCALE, CACHE)
for name, run in trained.items():
    print(f"{name}: {run.summary()}")
main = trained["MLMHA"]
model, test = main.model, main.dataset("test")
encoder_layers = model.config.encoder.layers
variant = main.run.model.decoder.mlmha_variant
print(f"MLMHA variant {variant}, {encoder_layers} encoder layers")

# %% [markdown]
# ## Force-decode reference translations in record mode
# Besides the usual maps, record mode hands out the MLMHA weights of every decoder layer per encoder layer read,
# (n, H, T, S) per sentence.

# %%
n = SCALE.analysis_sentences
records = {name: list(force_decode_sentences(run.model, test.src[:n], test.tgt[:n])) for name, run in trained.items()}
first = records["MLMHA"][0]
print(f"{n} sentences; MLMHA weights of decoder layer 1: {tuple(first.layer_weights[0].shape)} (n, heads, T, S)")

# %% [markdown]
# ## Mean attention distance and entropy per encoder head and layer
# Eqs. 13-16 over the force-decoded sentences (distance in subword pieces, entropy in nats), summed over every key
# (`|i - j|`; the printed equations only sum `j <= i`, see `mma_nmt.analysis.distance_entropy`). The paper reports
# that exposing every encoder layer to the decoder changes how the encoder attends: with layer-specific weights
# (M-1j) the first layers attend short-range and the upper layers long-range. What to look for in the full preset:
# differences between the two models, layer by layer. In the tiny preset the numbers are those of a barely trained
# encoder: read them as a check that the analysis runs, not as evidence either way.

# %%
for name, recs in records.items():
    stats = head_distance_entropy([r.encoder_self for r in recs])
    show(plot_distance_entropy(stats, title=f"{name}: encoder self-attention"),
         f"distance_entropy_{name.split()[0]}.png")
    print(name)
    for layer in range(encoder_layers):
        print(f"  layer {layer + 1}: distance {stats.layer_distance[layer]:.2f}, "
              f"entropy {stats.layer_entropy[layer]:.2f}")

# %% [markdown]
# ## Cross-attention over each encoder layer output, one sentence
# One row of panels per encoder layer output `f_i` read by the top decoder layer, one column per head. Each map is a
# distribution over the source; the decoder sums the contexts of all rows. Entropy per `f_i` (averaged over heads,
# target tokens and the force-decoded sentences, below) tells whether the decoder reads some layers sharply and
# others broadly.

# %%
index = min(range(n), key=lambda i: abs(records["MLMHA"][i].source_length - 10))
record = records["MLMHA"][index]
top = model.config.decoder.layers - 1
show(plot_layer_weights(record.layer_weights[top], source_tokens=pieces(test.src_tokenizer, test.src[index]),
                        target_tokens=pieces(test.tgt_tokenizer, test.tgt[index]) + ["</s>"],
                        title=f"Decoder layer {top + 1}: MLMHA weights over each encoder layer output"),
     "layer_weights.png")
for layer in range(model.config.decoder.layers):
    cross = head_distance_entropy([r.layer_weights[layer] for r in records["MLMHA"]])
    print(f"decoder layer {layer + 1}: entropy of the weights over f_1..f_{encoder_layers}:",
          [round(float(e), 2) for e in cross.layer_entropy])

# %% [markdown]
# ### Interactive view
# The usual blocks plus, per decoder layer, the MLMHA weights over each encoder layer output (block
# `MLMHA, decoder layer k`: its "layers" are the encoder outputs `f_i`). Pick a sentence, block and layer; click a head
# to draw it large, hover a cell for its weight.

# %%
def mlmha_blocks(i, record):
    source, target = pieces(test.src_tokenizer, test.src[i]), pieces(test.tgt_tokenizer, test.tgt[i]) + ["</s>"]
    return {f"MLMHA, decoder layer {k + 1}": ExplorerBlock(weights, target, source,
                                                           layer_names=[f"f_{j + 1}" for j in range(len(weights))])
            for k, weights in sorted(record.layer_weights.items())}


print(show_attention_explorer(OUT, test, records["MLMHA"], title=f"MLMHA {variant}: force-decoded test sentences",
                              extra=mlmha_blocks))

# %% [markdown]
# ## Layer masking at test time (the paper's Table 7)
# Each encoder layer output in turn is replaced by zeros where the MLMHA cross-attention reads it (the encoder itself
# is unchanged: layer `i + 1` still sees layer `i`), and the test sentences are translated again (greedy). A large
# drop means the decoder relies on that layer. With a model trained for seconds BLEU is near zero to begin with, so in
# the tiny preset the table mostly shows the mechanism; in the full preset compare the drops across layers.

# %%
count = SCALE.test_sentences
references = test.tgt_text[:count]
hypotheses = greedy_translations(trained, test, count)


def translate(masked_layer):
    if masked_layer is None:
        return hypotheses["MLMHA"]
    with masked_encoder_layer(model, masked_layer):
        return translate_dataset(model, test, main.run.decode, limit=count)


table = layer_masking_table(translate, references, num_layers=encoder_layers)
display(Markdown(format_layer_masking_table(table)))
print(format_layer_masking_table(table))

# %% [markdown]
# ## BLEU by source length

# %%
show_bleu_by_source_length(show, test, hypotheses)
print(f"done in {time.time() - started:.1f} s")
