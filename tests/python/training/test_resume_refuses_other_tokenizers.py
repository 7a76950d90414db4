"""Resuming a run on data prepared again with another SentencePiece model of the same size is refused (issue 50, case
1): it would go on training on other token ids, and its next save would record the new tokenizers as the model's."""

from __future__ import annotations

import pytest
import torch

from mma_nmt.data import PrepareConfig, prepare
from mma_nmt.training.checkpoint import CheckpointError
from mma_nmt.training.config import load_run_config
from mma_nmt.training.trainer import Trainer
from nmt_fixtures import MULTI30K, tiny_overrides


def _prepare(out_dir, model_type: str):
    return prepare(PrepareConfig(corpus="multi30k_de_en", data_dir=str(MULTI30K.parent), out_dir=str(out_dir),
                                 vocab_size=320, model_type=model_type, max_train_lines=50, splits=("train", "valid"),
                                 progress=False))


def test_resume_on_data_prepared_with_another_model_of_the_same_size_is_refused(tmp_path):
    data, save_dir = tmp_path / "data", tmp_path / "run"
    _prepare(data, "bpe")
    run = load_run_config(None, tiny_overrides(data, save_dir, "train.max_steps=4", "train.save_every=4"))
    Trainer(run).train()
    before = torch.load(save_dir / "last.pt", weights_only=True)["tokenizers"]

    _prepare(data, "unigram")  # the same lines, another model of the same size
    with pytest.raises(CheckpointError) as refused:
        Trainer(load_run_config(None, tiny_overrides(data, save_dir, "train.max_steps=8", "train.save_every=4")))
    message = str(refused.value)
    assert str(save_dir / "last.pt") in message and "--overwrite" in message and "train.save_dir" in message
    now = torch.load(save_dir / "last.pt", weights_only=True)["tokenizers"]
    assert now == before  # nothing was rewritten
    from mma_nmt.data import Tokenizer
    assert before["src"][:16] in message and Tokenizer.load(data / "spm_src.model").fingerprint[:16] in message
