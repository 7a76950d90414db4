"""Analyses of what attention heads do (issue 7). Every analysis takes plain tensors or lists (attention weights of
one sentence shaped (H, T, S) or (L, H, T, S), token lists, link sets, strings), returns data (a dataclass or dict) and
has an optional ``plot_*`` function returning a matplotlib Figure built without pyplot (no display needed).

Modules: :mod:`attention_maps` (per-sentence maps of every layer and head), :mod:`distance_entropy` (MLMHA eqs. 13-16),
:mod:`relative_position` (LSTM multi-head paper), :mod:`gmm_analysis` (gate, entropy by length, n-gram gap),
:mod:`alignment` (gold alignments, AER), :mod:`buckets` (BLEU by source length, layer masking).
"""

from mma_nmt.analysis._figures import new_figure, save_figure
from mma_nmt.analysis.alignment import (AlignmentScores, GoldAlignment, align_with_model, alignment_scores,
                                        diagonal_links, diagonal_scores, links_from_attention, parse_talp_line,
                                        piece_to_word_attention, read_gold_alignments, word_ids_from_pieces)
from mma_nmt.analysis.attention_maps import (SentenceAttention, head_labels, plot_attention_grid, plot_gmm_components,
                                             plot_head_gates, plot_layer_weights, plot_sentence_attention,
                                             sentence_attention)
from mma_nmt.analysis.buckets import (BucketScore, LayerMaskingRow, bleu_by_source_length, format_layer_masking_table,
                                      layer_masking_table, plot_bleu_by_source_length)
from mma_nmt.analysis.distance_entropy import (DistanceEntropy, attention_distance, attention_entropy,
                                               head_distance_entropy, plot_distance_entropy, shared_colour_limits,
                                               plot_layer_profiles)
from mma_nmt.analysis.gmm_analysis import (EntropyByLength, GateDistribution, NgramPrecision,
                                           entropy_by_source_length, gate_distribution, ngram_precision_gap,
                                           ngram_precisions, plot_entropy_by_source_length, plot_gate_distribution,
                                           plot_ngram_precision_gap)
from mma_nmt.analysis.relative_position import (RelativePositionResponse, head_divergence,
                                                plot_relative_position_panels, plot_relative_position_response,
                                                relative_position_response)

__all__ = [
    "AlignmentScores",
    "BucketScore",
    "DistanceEntropy",
    "EntropyByLength",
    "GateDistribution",
    "GoldAlignment",
    "LayerMaskingRow",
    "NgramPrecision",
    "RelativePositionResponse",
    "SentenceAttention",
    "align_with_model",
    "alignment_scores",
    "attention_distance",
    "attention_entropy",
    "bleu_by_source_length",
    "diagonal_links",
    "diagonal_scores",
    "entropy_by_source_length",
    "format_layer_masking_table",
    "gate_distribution",
    "head_distance_entropy",
    "head_divergence",
    "head_labels",
    "layer_masking_table",
    "links_from_attention",
    "new_figure",
    "ngram_precision_gap",
    "ngram_precisions",
    "parse_talp_line",
    "piece_to_word_attention",
    "plot_attention_grid",
    "plot_bleu_by_source_length",
    "plot_distance_entropy",
    "shared_colour_limits",
    "plot_entropy_by_source_length",
    "plot_gate_distribution",
    "plot_gmm_components",
    "plot_head_gates",
    "plot_layer_profiles",
    "plot_layer_weights",
    "plot_ngram_precision_gap",
    "plot_relative_position_panels",
    "plot_relative_position_response",
    "plot_sentence_attention",
    "read_gold_alignments",
    "relative_position_response",
    "save_figure",
    "sentence_attention",
    "word_ids_from_pieces",
]
