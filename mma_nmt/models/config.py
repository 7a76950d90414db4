"""Dataclass configs of the models. Attention is chosen per place by name (see ``attention_factory``):

- encoder self-attention ``EncoderConfig.attention``: ``"standard"`` | ``"mma"`` (``head_spec`` + ``window``) |
  ``"multihop"`` (second hop of SPEC section 4 in ``multihop_layers``, size ``multihop_hidden``);
- what cross-attention reads, ``EncoderConfig.layer_aggregation``: ``"none"`` (the top layer) | ``"linear"`` |
  ``"iterative"`` | ``"transparent"`` (the layer-aggregation baselines of the MLMHA paper);
- decoder cross-attention ``DecoderConfig.cross_attention``: ``"standard"`` | ``"mlmha"`` (``mlmha_n`` +
  ``mlmha_variant``) | ``"gmm"`` (``gmm_*`` fields; variants in ``attention_adapters.GMM_VARIANTS``);
- LSTM attention ``LSTMConfig.attention``: ``"luong"`` (multi-head Luong, SPEC section 2).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Optional

from mma_nmt.config_io import check_choices, require_at_least
from mma_nmt.config_types import Implementation, LuongScoreForm
from mma_nmt.modules.multilayer_attention import MlmhaVariant
from mma_nmt.ops.head_spec import parse_head_spec

TransformerImplementation = Literal["fused", "reference", "torch"]
EncoderAttention = Literal["standard", "mma", "multihop"]
LayerAggregation = Literal["none", "linear", "iterative", "transparent"]
CrossAttention = Literal["standard", "mlmha", "gmm"]


@dataclass
class EncoderConfig:
    layers: int = 6
    attention: EncoderAttention = "standard"
    head_spec: str = "GLFB"  # MMA: one letter per head kind, stretched to the head count ("GLFB" -> "GGLLFFBB")
    window: int = 1  # MMA: local heads see |i - j| <= window
    positional_embedding: bool = True  # False removes the encoder's positional embedding (MMA paper, Table 3)
    multihop_layers: list[int] = field(default_factory=lambda: [3])  # 0-based; the paper's best is layer 4 of 6
    multihop_hidden: Optional[int] = None  # D_b of the second hop; None = head size (SPEC section 4)
    # What the decoder's cross-attention reads instead of the top layer (MLMHA paper baselines, SPEC section 3):
    # "none" | "linear" | "iterative" (one joint representation of all layers) | "transparent" (one per decoder layer)
    layer_aggregation: LayerAggregation = "none"

    def __post_init__(self):
        check_choices("model.encoder", self)
        try:  # the letters, also where the attention is not "mma": a typo must not pass unnoticed
            parse_head_spec(self.head_spec, len(self.head_spec))
        except (TypeError, ValueError) as error:
            raise ValueError(f"model.encoder.{error}") from None
        require_at_least("model.encoder", self, window=0)


@dataclass
class DecoderConfig:
    layers: int = 6
    cross_attention: CrossAttention = "standard"
    mlmha_n: Optional[int] = None  # MLMHA: read the top n encoder layers; None = all of them (n = L)
    # MLMHA "M-ij": U0 = i (0 joint, 1 layer-specific weights), U1 = j (0 concat, 1 sum)
    mlmha_variant: MlmhaVariant = "M-11"
    # GMM (SPEC section 5, attention_adapters.GMM_VARIANTS): a normalisation, named as in mma_nmt.ops.gmm_normalization,
    # "approximate" (the paper's method) | "strict" (+Norm.) | "unnormalised" (synthesis network); or "hard" |
    # "localness" | "mixture" | "dot" | "average_gate" | "share_mean" | "share_variance" | "share_weight"
    gmm_variant: str = "approximate"
    gmm_components: int = 4  # GMM: K
    gmm_layers: Optional[list[int]] = None  # GMM: 0-based decoder layers using GMM; None = all (others use "standard")

    def __post_init__(self):
        check_choices("model.decoder", self)


# decoder.gmm_variant names of earlier versions, when two of the normalisation variants were named apart from their
# normalisation. Stored configs keep them: every Transformer checkpoint of that time holds the default "approx", and an
# experiment keeps its run configs as given (a run's identity is the hash of that text, so experiment records cannot be
# rewritten). upgrade_stored_model_config reads them as today's names; nothing else knows them.
LEGACY_GMM_VARIANTS = {"approx": "approximate", "synthesis": "unnormalised"}


def upgrade_stored_model_config(model: dict) -> dict:
    """A stored ``[model]`` section (of a run config or experiment record, or a checkpoint's ``model_config``) with
    today's names: ``decoder.gmm_variant`` of an earlier version (:data:`LEGACY_GMM_VARIANTS`) renamed, in a copy;
    anything else is returned as it is (and validated where it is built)."""
    decoder = model.get("decoder")
    variant = decoder.get("gmm_variant") if isinstance(decoder, dict) else None
    if not isinstance(variant, str) or variant not in LEGACY_GMM_VARIANTS:
        return model
    return {**model, "decoder": {**decoder, "gmm_variant": LEGACY_GMM_VARIANTS[variant]}}


@dataclass
class TransformerConfig:
    """Transformer encoder-decoder. Vocabulary sizes are filled in from the prepared data when left at 0."""

    arch: Literal["transformer"] = "transformer"
    src_vocab_size: int = 0
    tgt_vocab_size: int = 0
    pad_id: int = 0
    d_model: int = 512
    ffn_dim: int = 2048
    heads: int = 8
    encoder: EncoderConfig = field(default_factory=EncoderConfig)
    decoder: DecoderConfig = field(default_factory=DecoderConfig)
    dropout: float = 0.1
    attention_dropout: float = 0.0
    activation_dropout: float = 0.0
    # post-norm as in the papers; True puts LayerNorm before each sublayer and after each stack, and after every lower
    # encoder layer that MLMHA or a layer aggregation reads (TransformerModel.lower_layer_norms)
    pre_norm: bool = False
    share_embeddings: bool = False  # one embedding table for source and target (needs a joint vocabulary)
    tie_output: bool = True  # output projection shares the target embedding's weight
    max_positions: int = 1024
    # fused operators, or plain-PyTorch reference modules (same parameters), or "torch": nn.MultiheadAttention
    # (standard and MMA attention only; its own parameter layout), the baseline of the benchmarks
    implementation: TransformerImplementation = "fused"

    def __post_init__(self):
        check_choices("model", self)
        require_at_least("model", self, heads=1, d_model=1, ffn_dim=1, max_positions=1)
        if self.d_model % self.heads:
            raise ValueError(f"model.d_model ({self.d_model}) must be divisible by model.heads ({self.heads})")


@dataclass
class LSTMConfig:
    """Bidirectional LSTM encoder, unidirectional LSTM decoder with input feeding, multi-head Luong attention."""

    arch: Literal["lstm"] = "lstm"
    src_vocab_size: int = 0
    tgt_vocab_size: int = 0
    pad_id: int = 0
    embed_dim: int = 1024  # word_vec_size
    hidden_size: int = 1024  # rnn_size d_h; each encoder direction has hidden_size // 2
    layers: int = 2  # N, same for encoder and decoder
    heads: int = 4  # h
    softmax_dim: int = 512  # d_sm: size of the attentional vector fed to the output layer
    feed_dim: int = 1024  # d_fd: size of the attentional vector fed to the next decoder step
    dropout: float = 0.5
    attention: Literal["luong"] = "luong"  # multi-head Luong attention (SPEC section 2)
    implementation: Implementation = "reference"  # or "fused": LuongMultiheadAttention on the fused op, same state dict
    # "projected_keys" (per-head keys W_sc_i hs, once per sentence) | "projected_query" (W_sc_i^T h_t per step, scored
    # against the encoder states; OpenNMT-py's form): the same function and state dict (docs/models_training.md)
    score_form: LuongScoreForm = "projected_keys"
    share_embeddings: bool = False
    tie_output: bool = False  # only possible when embed_dim == softmax_dim
    param_init: float = 0.0  # > 0: every weight drawn from U(-param_init, param_init) (OpenNMT-py's -param_init)

    def __post_init__(self):
        check_choices("model", self)
        require_at_least("model", self, heads=1, embed_dim=1, hidden_size=1, layers=1)
        if not self.param_init >= 0:  # NaN fails too
            raise ValueError(f"model.param_init must be 0 (PyTorch's initialisation) or positive, got {self.param_init}")


ModelConfig = TransformerConfig | LSTMConfig
MODEL_CONFIGS = {"transformer": TransformerConfig, "lstm": LSTMConfig}
