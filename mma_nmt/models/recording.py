"""Recording the attention weights of a model for analysis: ``with record_attention(model) as recorder: ...``.

While the context is open, every attention module of the model is in *record mode*:

* it computes with its plain-PyTorch reference path (``implementation="reference"``, the formulas of SPEC that the
  fused operators are checked against; the operators themselves are not involved);
* it is asked for its weights on every call (``need_weights=True``, and ``need_head_gate=True`` for multi-hop), whatever
  its caller asked for;
* a forward hook keeps a detached copy of what it hands out, per call.

On exit the hooks are removed and every module gets its own config back. What each module kind hands out is listed in
:data:`PROBES`. :func:`collect_attention` then arranges the records of one teacher-forced pass by place (encoder
self-attention, decoder self-attention, cross-attention, multi-hop head gates, MLMHA per-layer weights, GMM
components) into an :class:`AttentionRecord`; :mod:`mma_nmt.evaluation.force_decode` runs that pass for sentence pairs.
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass, field
from typing import Callable, Iterator

import torch
from torch import nn

from mma_nmt.models.attention_adapters import CausalSelfAttention, StandardCrossAttention
from mma_nmt.modules import (GmmCrossAttention, LuongMultiheadAttention, MixedMultiheadAttention,
                             MultiHopSelfAttention, MultiLayerMultiheadAttention)
from mma_nmt.modules.gmm_predictors import MixturePredictor
from mma_nmt.ops.head_spec import format_head_spec

Reader = Callable[[object], dict]


@dataclass(frozen=True)
class Probe:
    """How one module kind is recorded: keyword arguments forced on each call, and what to keep of its output."""

    force: dict
    read: Reader


def _weights_at(index: int) -> Reader:
    return lambda out: {"weights": out[index]}


def _multihop(out) -> dict:
    weights = out[1]  # MultiHopWeights(attention (B, H, T, S), head_gate (B, T, H))
    return {"weights": weights.attention, "head_gate": weights.head_gate}


def _gmm(out) -> dict:
    return dict(out[1])  # alpha, beta, gamma (B, H, T, S), gate (B, H, T); dot-only layers: alpha, gamma


def _mixture(params) -> dict:
    kept = {name: getattr(params, name) for name in ("omega", "mu", "sigma", "gate")}  # (B, H, T, K), gate (B, H, T)
    if params.local_center is not None:  # localness variant
        kept.update(local_center=params.local_center, local_width=params.local_width)
    return kept


# module class -> probe. The wrappers that call ``MixedMultiheadAttention.attend`` directly (causal self-attention,
# standard cross-attention) are probed themselves: their inner module's forward is never called.
PROBES: dict[type, Probe] = {
    MixedMultiheadAttention: Probe({"need_weights": True}, _weights_at(1)),
    CausalSelfAttention: Probe({"need_weights": True}, _weights_at(1)),
    StandardCrossAttention: Probe({"need_weights": True}, _weights_at(1)),
    MultiHopSelfAttention: Probe({"need_weights": True, "need_head_gate": True}, _multihop),
    MultiLayerMultiheadAttention: Probe({"need_weights": True}, _weights_at(1)),
    GmmCrossAttention: Probe({"need_weights": True}, _gmm),
    MixturePredictor: Probe({}, _mixture),
    LuongMultiheadAttention: Probe({"need_weights": True}, _weights_at(2)),  # alpha (B, h, S) of one decoder step
}

# Modules whose ``config.implementation`` chooses between the fused operators and the reference formulas.
SWITCHABLE = (MixedMultiheadAttention, MultiHopSelfAttention, MultiLayerMultiheadAttention, GmmCrossAttention,
              LuongMultiheadAttention)


class AttentionRecorder:
    """What the probed modules handed out while the context was open: ``calls(module)`` is a list with one dict of
    detached tensors per call, in call order."""

    def __init__(self) -> None:
        self._calls: dict[int, list[dict[str, torch.Tensor]]] = {}

    def add(self, module: nn.Module, values: dict) -> None:
        kept = {k: v.detach() for k, v in values.items() if isinstance(v, torch.Tensor)}
        self._calls.setdefault(id(module), []).append(kept)

    def calls(self, module: nn.Module) -> list[dict[str, torch.Tensor]]:
        return self._calls.get(id(module), [])

    def clear(self) -> None:
        self._calls.clear()

    def subtree(self, root: nn.Module) -> dict[str, torch.Tensor]:
        """The values of every recorded module under ``root`` (itself included), merged, from exactly one call.

        Raises RuntimeError when a module there was called more than once (record one teacher-forced pass)."""
        merged: dict[str, torch.Tensor] = {}
        for module in root.modules():
            calls = self.calls(module)
            if len(calls) > 1:
                raise RuntimeError(f"{type(module).__name__} was called {len(calls)} times while recording; record "
                                   f"one teacher-forced pass per context (see mma_nmt.evaluation.force_decode)")
            if calls:
                merged.update(calls[0])
        return merged


@contextlib.contextmanager
def record_attention(model: nn.Module, *, reference: bool = True) -> Iterator[AttentionRecorder]:
    """Puts every attention module of ``model`` in record mode (see the module docstring) until the block ends.

    ``reference=False`` keeps each module's own implementation (the fused operators return the same weights on
    request); the default computes with the reference formulas.
    """
    recorder = AttentionRecorder()
    handles, swapped = [], []
    try:
        for module in model.modules():
            probe = PROBES.get(type(module))
            if probe is not None:
                handles.append(module.register_forward_pre_hook(_forcing(probe.force), with_kwargs=True))
                handles.append(module.register_forward_hook(_keeping(recorder, probe.read)))
            if reference and isinstance(module, SWITCHABLE) and module.config.implementation != "reference":
                swapped.append((module, module.config))
                module.config = dataclasses.replace(module.config, implementation="reference")
        yield recorder
    finally:
        for handle in handles:
            handle.remove()
        for module, config in swapped:
            module.config = config


def _forcing(force: dict):
    def hook(module, args, kwargs):
        return args, {**kwargs, **force}
    return hook


def _keeping(recorder: AttentionRecorder, read: Reader):
    def hook(module, args, output):
        recorder.add(module, read(output))
    return hook


@dataclass
class AttentionRecord:
    """The attention of one teacher-forced batch, by place. ``S`` source positions, ``T`` decoder positions (BOS and
    the target tokens; row ``t`` of decoder weights is used to predict target token ``t``, the last row EOS).

    Per-layer lists are bottom layer first; dict keys are 0-based layer indices.
    """

    src_lengths: torch.Tensor  # (B,) int64
    tgt_lengths: torch.Tensor  # (B,) int64 decoder positions per sentence
    cross: list[torch.Tensor]  # per decoder layer (B, H, T, S): the weights that build the context (GMM: gamma;
    # MLMHA with layer-specific weights: their mean over the n encoder layers read)
    encoder_self: list[torch.Tensor] = field(default_factory=list)  # per encoder layer (B, H, S, S); [] for the LSTM
    encoder_head_kinds: list[str] = field(default_factory=list)  # per encoder layer, one letter per head ("GGLLFFBB")
    decoder_self: list[torch.Tensor] = field(default_factory=list)  # per decoder layer (B, H, T, T); [] for the LSTM
    head_gate: dict[int, torch.Tensor] = field(default_factory=dict)  # encoder layer -> (B, S, H) multi-hop gate
    layer_weights: dict[int, torch.Tensor] = field(default_factory=dict)  # decoder layer -> (B, n, H, T, S) MLMHA
    # weights over each encoder layer read (n = 1: the joint weights of M-0j)
    gmm: dict[int, dict[str, torch.Tensor]] = field(default_factory=dict)  # decoder layer -> alpha, beta, gamma
    # (B, H, T, S), gate (B, H, T), omega, mu, sigma (B, H, T, K) in source positions

    @property
    def batch_size(self) -> int:
        return int(self.src_lengths.numel())

    def sentence(self, index: int) -> "SentenceRecord":
        """Sentence ``index`` without its batch axis, cut to its true lengths."""
        s, t = int(self.src_lengths[index]), int(self.tgt_lengths[index])

        def stack(layers, rows, cols):
            return torch.stack([w[index, :, :rows, :cols] for w in layers]) if layers else None

        gmm = {}
        for layer, values in self.gmm.items():
            gmm[layer] = {name: (v[index, :, :t, :s] if v.dim() == 4 and name in ("alpha", "beta", "gamma")
                                 else v[index, :, :t]) for name, v in values.items()}
        return SentenceRecord(
            source_length=s, target_length=t, cross=stack(self.cross, t, s),
            encoder_self=stack(self.encoder_self, s, s), encoder_head_kinds=list(self.encoder_head_kinds),
            decoder_self=stack(self.decoder_self, t, t),
            head_gate={layer: g[index, :s].transpose(0, 1) for layer, g in self.head_gate.items()},
            layer_weights={layer: w[index, :, :, :t, :s] for layer, w in self.layer_weights.items()}, gmm=gmm)


@dataclass
class SentenceRecord:
    """One sentence of an :class:`AttentionRecord`, cut to ``source_length`` S and ``target_length`` T."""

    source_length: int
    target_length: int
    cross: torch.Tensor  # (L_dec, H, T, S)
    encoder_self: torch.Tensor | None  # (L_enc, H, S, S)
    encoder_head_kinds: list[str]
    decoder_self: torch.Tensor | None  # (L_dec, H, T, T)
    head_gate: dict[int, torch.Tensor]  # encoder layer -> (H, S): head-first, as plot_head_gates takes it
    layer_weights: dict[int, torch.Tensor]  # decoder layer -> (n, H, T, S)
    gmm: dict[int, dict[str, torch.Tensor]]  # decoder layer -> (H, T, S) weights, (H, T) gate, (H, T, K) components

    def to_bertviz(self, source_tokens: list[str], target_tokens: list[str]) -> dict:
        """The keyword arguments of bertviz's ``head_view`` and ``model_view`` for this sentence (bertviz is not a
        dependency): ``bertviz.head_view(**sentence.to_bertviz(src, tgt))``.

        ``source_tokens`` (S) and ``target_tokens`` (T, the decoder's inputs, BOS first) label the axes. Returns
        ``encoder_attention`` (per encoder layer (1, H, S, S)), ``decoder_attention`` (per decoder layer (1, H, T, T)),
        ``cross_attention`` (per decoder layer (1, H, T, S)), each a tuple and left out where the model has no such
        attention (the LSTM's encoder and decoder), and ``encoder_tokens`` / ``decoder_tokens``."""
        for name, tokens, length in (("source_tokens", source_tokens, self.source_length),
                                     ("target_tokens", target_tokens, self.target_length)):
            if len(tokens) != length:
                raise ValueError(f"to_bertviz: {name} has {len(tokens)} tokens but the sentence has {length}")
        views = {"encoder_attention": self.encoder_self, "decoder_attention": self.decoder_self,
                 "cross_attention": self.cross}
        arguments = {name: tuple(layer.unsqueeze(0) for layer in weights)  # (L, H, rows, cols) -> L x (1, H, ...)
                     for name, weights in views.items() if weights is not None}
        return {**arguments, "encoder_tokens": list(source_tokens), "decoder_tokens": list(target_tokens)}


def _encoder_kinds(self_attn: nn.Module, heads: int) -> str:
    if isinstance(self_attn, MixedMultiheadAttention):
        return format_head_spec(self_attn.head_kinds)
    return "G" * heads  # standard and multi-hop first-hop heads see every source token


def collect_attention(model: nn.Module, recorder: AttentionRecorder, *, src_lengths: torch.Tensor,
                      tgt_lengths: torch.Tensor) -> AttentionRecord:
    """Arranges what ``recorder`` kept during one teacher-forced pass of ``model`` (a Transformer or an LSTM model)."""
    lengths = dict(src_lengths=src_lengths.detach().cpu(), tgt_lengths=tgt_lengths.detach().cpu())
    if hasattr(model, "encoder_layers"):
        return _collect_transformer(model, recorder, lengths)
    if hasattr(model, "decoder") and hasattr(model.decoder, "attention"):
        steps = recorder.calls(model.decoder.attention)
        if not steps:
            raise RuntimeError("nothing was recorded: run the model inside record_attention(model)")
        alpha = torch.stack([step["weights"] for step in steps], dim=2)  # T x (B, h, S) -> (B, h, T, S)
        return AttentionRecord(cross=[alpha], **lengths)
    raise TypeError(f"collect_attention knows TransformerModel and LSTMModel, not {type(model).__name__}")


def _collect_transformer(model: nn.Module, recorder: AttentionRecorder, lengths: dict) -> AttentionRecord:
    heads = model.config.heads
    record = AttentionRecord(cross=[], **lengths)
    for i, layer in enumerate(model.encoder_layers):
        values = recorder.subtree(layer.self_attn)
        if "weights" not in values:
            raise RuntimeError("nothing was recorded: run the model inside record_attention(model)")
        record.encoder_self.append(values["weights"])
        record.encoder_head_kinds.append(_encoder_kinds(layer.self_attn, heads))
        if "head_gate" in values:
            record.head_gate[i] = values["head_gate"]
    for i, layer in enumerate(model.decoder_layers):
        record.decoder_self.append(recorder.subtree(layer.self_attn)["weights"])
        values = recorder.subtree(layer.cross_attn)
        if "gamma" in values:  # GMM cross-attention (dot-product only layers give alpha = gamma)
            record.gmm[i] = values
            record.cross.append(values["gamma"])
            continue
        weights = values["weights"]
        if weights.dim() == 5:  # MLMHA layer-specific weights (B, n, H, T, S)
            record.layer_weights[i] = weights
            weights = weights.mean(dim=1)
        elif isinstance(getattr(layer.cross_attn, "attn", None), MultiLayerMultiheadAttention):
            record.layer_weights[i] = weights.unsqueeze(1)  # joint weights (B, 1, H, T, S)
        record.cross.append(weights)
    return record
