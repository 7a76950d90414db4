"""Shared helpers of the model/training/decoding tests: a tiny prepared Multi30k subset and tiny models."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from mma_nmt.models import preset
from mma_nmt.models.attention_adapters import GMM_VARIANTS

REPO = Path(__file__).resolve().parents[2]
MULTI30K = Path(os.environ.get("MMA_NMT_DATA_DIR", REPO.parent / "shared" / "data")) / "multi30k"  # as conftest.py


def prepare_tiny(out_dir: Path, lines: int = 50, vocab_size: int = 320) -> Path:
    """The first ``lines`` Multi30k De-En training pairs with a small joint BPE vocabulary (train and valid splits)."""
    from mma_nmt.data import PrepareConfig, prepare

    return prepare(PrepareConfig(corpus="multi30k_de_en", data_dir=str(MULTI30K.parent), out_dir=str(out_dir),
                                 vocab_size=vocab_size, max_train_lines=lines, splits=("train", "valid"),
                                 progress=False))


@pytest.fixture
def tiny_data(tmp_path_factory) -> Path:
    """Prepared once per test session (``prepare`` is idempotent, so later calls only check the files)."""
    return prepare_tiny(tmp_path_factory.getbasetemp() / "tiny_multi30k_50")


TINY_TRANSFORMER = ["model.d_model=32", "model.ffn_dim=64", "model.heads=4", "model.encoder.layers=1",
                    "model.decoder.layers=1", "model.encoder.attention=mma"]


def tiny_overrides(data_dir: Path, save_dir: Path, *extra: str, model: list[str] = TINY_TRANSFORMER) -> list[str]:
    """Run-config overrides for a very small model (a Transformer unless ``model`` says otherwise) on the tiny data,
    on one CPU thread."""
    return [f"data.out_dir={data_dir}", f"train.save_dir={save_dir}", *model, "train.max_tokens=400",
            "train.progress=false", "train.bleu_sentences=0", "train.validate_every=100000",
            "train.threads=1", "train.optim.warmup_steps=5", "train.optim.lr=0.003", "train.log_every=5",
            *extra]


def trained_tiny_run(tmp_path_factory, name: str) -> tuple[list[str], Path, Path]:
    """A 2-step tiny Transformer on the tiny data, decoding short outputs with a beam of 2: (run-config overrides,
    its ``last.pt``, the prepared data folder)."""
    from mma_nmt.training.config import load_run_config
    from mma_nmt.training.trainer import Trainer

    data = prepare_tiny(tmp_path_factory.getbasetemp() / "tiny_multi30k_50")
    save_dir = tmp_path_factory.mktemp(name)
    overrides = tiny_overrides(data, save_dir, "train.max_steps=2", "decode.beam_size=2", "decode.max_len_b=3",
                               "decode.max_len_a=0.2", "eval.attention_maps=0")
    Trainer(load_run_config(None, overrides)).train()
    return overrides, save_dir / "last.pt", data


def tiny_transformer(**overrides):
    """A 32-wide Transformer config (vocabularies 37/41 unless overridden), no dropout."""
    fields = {"src_vocab_size": 37, "tgt_vocab_size": 41, "dropout": 0.0, "d_model": 32, "ffn_dim": 64, **overrides}
    return preset("transformer_tiny", **fields)


def tiny_mma_mlmha_transformer():
    """A 16-wide Transformer: encoder MMA (mixed G/L/F/B heads, ``mma_nmt::attention``), decoder cross-attention
    MLMHA M-10 over the top 2 layers (``multilayer_attention``)."""
    config = tiny_transformer(d_model=16, ffn_dim=32)
    config.encoder.attention = "mma"
    config.decoder.cross_attention = "mlmha"
    config.decoder.mlmha_n = 2
    config.decoder.mlmha_variant = "M-10"
    return config


# (sentences, source length, target length) of ten batches: ten target lengths, batch size and source length varying
# too (the compile tests: how many graphs a compiled model makes over a run's batch shapes)
VARIED_SHAPES = [(3, 7, 6), (4, 9, 8), (2, 5, 11), (5, 12, 7), (3, 8, 9), (6, 6, 5), (2, 10, 13), (4, 7, 10),
                 (3, 11, 12), (5, 9, 14)]


def random_batch(batch: int = 3, src_len: int = 7, tgt_len: int = 6, seed: int = 0):
    """src (B, S) with right padding, src_lengths (B,), prev (B, T) starting with BOS, target (B, T)."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([src_len] + [max(1, src_len - 2 * i - 1) for i in range(1, batch)])
    src = torch.randint(4, 37, (batch, src_len), generator=g)
    src[torch.arange(src_len).unsqueeze(0) >= lengths.unsqueeze(1)] = 0
    tgt = torch.randint(4, 41, (batch, tgt_len), generator=g)
    prev = torch.cat([torch.ones(batch, 1, dtype=torch.long), tgt[:, :-1]], dim=1)
    return src, lengths, prev, tgt


def _transformer(**encoder_decoder):
    config = tiny_transformer(d_model=16, ffn_dim=32, dropout=0.1)
    for name, value in encoder_decoder.items():
        place, field_name = name.split("__")
        setattr(getattr(config, place), field_name, value)
    return config


def _gmm(variant: str, implementation: str = "fused"):
    def build():
        config = _transformer(decoder__cross_attention="gmm", decoder__gmm_variant=variant)
        config.implementation = implementation
        return config
    return build


def _lstm(implementation: str, score_form: str = "projected_keys"):
    return lambda: preset("lstm_tiny", src_vocab_size=37, tgt_vocab_size=41, embed_dim=16, hidden_size=16,
                          softmax_dim=16, feed_dim=16, implementation=implementation, score_form=score_form)


def _reference(build):
    def reference():
        config = build()
        config.implementation = "reference"
        return config
    return reference


# every model family, tiny, by name (a callable returns a fresh config): tests that must hold for each one
MODEL_FAMILIES: dict[str, Callable] = {
    "standard": _transformer,
    "standard on nn.MultiheadAttention": lambda: tiny_transformer(d_model=16, ffn_dim=32, implementation="torch"),
    "mma": lambda: _transformer(encoder__attention="mma"),
    "mma reference": _reference(lambda: _transformer(encoder__attention="mma")),
    "multihop": lambda: _transformer(encoder__attention="multihop", encoder__multihop_layers=[1]),
    "mma+mlmha": tiny_mma_mlmha_transformer,
    "mlmha M-01": lambda: _transformer(decoder__cross_attention="mlmha", decoder__mlmha_variant="M-01"),
    "transparent layers": lambda: _transformer(encoder__layer_aggregation="transparent"),
    **{f"gmm {variant}": _gmm(variant) for variant in GMM_VARIANTS},
    "gmm unnormalised reference": _gmm("unnormalised", "reference"),
    "lstm fused": _lstm("fused"),
    "lstm fused, projected query": _lstm("fused", "projected_query"),
    "lstm reference": _lstm("reference"),
}
