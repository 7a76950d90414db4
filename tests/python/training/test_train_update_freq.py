"""``train.update_freq``: k accumulated batches make the same update as one batch holding all their sentences."""

from __future__ import annotations

import copy

import torch

from mma_nmt.data import ParallelDataset, collate
from mma_nmt.models import build_model
from mma_nmt.training.config import load_run_config
from mma_nmt.training.distributed import DistInfo
from mma_nmt.training.trainer import Trainer, forward_backward, with_vocabulary

from nmt_fixtures import tiny_data, tiny_overrides, tiny_transformer  # noqa: F401  (fixture)


def _gradients(model, batches) -> tuple[dict, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    totals = forward_backward(model, batches, epsilon=0.1, pad_id=0, info=DistInfo())
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}, totals


def test_accumulated_halves_give_the_gradient_of_the_whole_batch(tiny_data):  # noqa: F811
    data = ParallelDataset.load(tiny_data, "train")
    model = build_model(with_vocabulary(tiny_transformer(), data)).double()
    sentences = list(range(12))
    whole, whole_totals = _gradients(model, collate(data, sentences))
    # uneven pieces with different padding widths: the scale must come from the tokens of all pieces together
    pieces = [collate(data, sentences[:3]), collate(data, sentences[3:8]), collate(data, sentences[8:])]
    parts, part_totals = _gradients(model, pieces)
    assert torch.allclose(whole_totals, part_totals, rtol=1e-6)  # the loss sums in float32
    assert whole.keys() == parts.keys()
    for name in whole:
        torch.testing.assert_close(parts[name], whole[name], rtol=1e-5, atol=1e-7, msg=name)
    # the scale must be the tokens of all pieces: averaging the pieces' own per-token gradients gives another result
    averaged = [_gradients(model, piece)[0] for piece in pieces]
    name = next(iter(whole))
    assert not torch.allclose(sum(g[name] for g in averaged) / len(pieces), whole[name], rtol=1e-3, atol=1e-6)


def test_two_accumulated_half_batches_make_the_same_adam_update(tiny_data):  # noqa: F811
    data = ParallelDataset.load(tiny_data, "train")
    torch.manual_seed(0)
    first = build_model(with_vocabulary(tiny_transformer(), data)).double()
    second = copy.deepcopy(first)
    updated = []
    for model, batches in ((first, [collate(data, list(range(10)))]),
                           (second, [collate(data, list(range(5))), collate(data, list(range(5, 10)))])):
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
        forward_backward(model, batches, epsilon=0.1, pad_id=0, info=DistInfo())
        optimizer.step()
        updated.append(dict(model.named_parameters()))
    for name, parameter in updated[0].items():
        torch.testing.assert_close(updated[1][name], parameter, rtol=1e-5, atol=1e-7, msg=name)


def test_trainer_consumes_update_freq_batches_per_update(tmp_path, tiny_data):  # noqa: F811
    overrides = tiny_overrides(tiny_data, tmp_path / "run", "train.max_steps=3", "train.update_freq=2",
                               "train.max_tokens=200")
    trainer = Trainer(load_run_config(None, overrides))
    per_epoch = len(trainer.sampler)
    assert per_epoch > 6, "the tiny data must give more than 6 batches per epoch for this test"
    trainer.train()
    assert trainer.step == 3
    assert trainer.sampler.state_dict()["position"] == 6  # two batches per update
    saved = torch.load(tmp_path / "run" / "last.pt", weights_only=True)
    assert saved["sampler"]["position"] == 6


def test_update_freq_below_one_is_refused():
    try:
        load_run_config(None, ["train.update_freq=0"])
    except ValueError as error:
        assert "train.update_freq" in str(error)
    else:
        raise AssertionError("update_freq=0 was accepted")


def test_sentence_normalisation_divides_the_summed_loss_by_the_sentences(tiny_data):  # noqa: F811
    """OpenNMT-py's ``-normalization sents``: the gradient is the token-normalised one times tokens / sentences."""
    data = ParallelDataset.load(tiny_data, "train")
    model = build_model(with_vocabulary(tiny_transformer(), data)).double()
    batch = collate(data, list(range(9)))
    by_tokens, _ = _gradients(model, batch)
    model.zero_grad(set_to_none=True)
    forward_backward(model, [batch], epsilon=0.1, pad_id=0, info=DistInfo(), normalization="sentences")
    ratio = batch.num_tokens / len(batch)
    assert ratio > 2
    for name, parameter in model.named_parameters():
        if parameter.grad is not None:
            torch.testing.assert_close(parameter.grad, by_tokens[name] * ratio, rtol=1e-5, atol=1e-7, msg=name)
