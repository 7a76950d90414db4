"""``train.length_multiple``: batches padded to wider shapes train every model family exactly as before, and the
trainer reports an epoch's distinct batch shapes (each records its own CUDA graphs under "reduce-overhead")."""

from __future__ import annotations

import json
import warnings
from collections import Counter

import pytest
import torch

from mma_nmt.data import ParallelDataset, collate
from mma_nmt.data.batch_shapes import EpochShapes
from mma_nmt.models import build_model
from mma_nmt.training.config import load_run_config
from mma_nmt.training.distributed import DistInfo
from mma_nmt.training.trainer import Trainer, forward_backward, warn_about_graph_recordings
from nmt_fixtures import MODEL_FAMILIES, tiny_data, tiny_overrides  # noqa: F401  (fixture)


class RandomPairs:
    """Five sentence pairs over the catalogue's vocabularies (source 37, target 41 words; 0 pads), lengths 1-9."""

    def __init__(self, seed: int = 3):
        g = torch.Generator().manual_seed(seed)
        self.src = [torch.randint(4, 37, (n,), generator=g) for n in (9, 1, 6, 4, 7)]
        self.tgt = [torch.randint(4, 41, (n,), generator=g) for n in (5, 8, 1, 6, 3)]


def _loss_and_gradients(model, batch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    totals = forward_backward(model, [batch], epsilon=0.1, pad_id=0, info=DistInfo())
    return totals, {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("name", MODEL_FAMILIES)
def test_padding_to_a_multiple_changes_no_loss_and_no_gradient(name):
    """float64, no dropout: the same sentences collated as they are (S 9, T 9) and padded to multiples of 8 (S 16,
    T 16) give the same loss sums and the same gradient of every parameter."""
    torch.manual_seed(0)
    model = build_model(MODEL_FAMILIES[name]()).double().eval()
    pairs = RandomPairs()
    exact = collate(pairs, range(5))
    padded = collate(pairs, range(5), length_multiple=8)
    assert exact.src.shape == (5, 9) and padded.src.shape == (5, 16) and padded.tgt_in.shape == (5, 16)
    totals, gradients = _loss_and_gradients(model, exact)
    padded_totals, padded_gradients = _loss_and_gradients(model, padded)
    torch.testing.assert_close(padded_totals, totals, rtol=1e-10, atol=1e-12)
    assert padded_gradients.keys() == gradients.keys() and gradients
    for parameter, gradient in gradients.items():
        torch.testing.assert_close(padded_gradients[parameter], gradient, rtol=1e-9, atol=1e-12, msg=parameter)


def test_a_run_with_a_length_multiple_trains_resumes_and_reports_its_shapes(tmp_path, tiny_data):  # noqa: F811
    logs = {}
    for multiple in (1, 8):
        save_dir = tmp_path / f"m{multiple}"
        run = load_run_config(None, tiny_overrides(tiny_data, save_dir, "train.max_steps=2",
                                                   f"train.length_multiple={multiple}"))
        Trainer(run).train()
        logs[multiple] = [json.loads(line) for line in (save_dir / "log.jsonl").read_text().splitlines()]
    reported = {m: next(e for e in log if e["event"] == "start")["batch_shapes"] for m, log in logs.items()}
    data = ParallelDataset.load(tiny_data, "train")
    for multiple, shapes in reported.items():
        sampler = data.batch_sampler(max_tokens=400, seed=1, max_len=256, length_multiple=multiple)
        batches = [collate(data, b, length_multiple=multiple) for b in sampler]
        assert shapes["length_multiple"] == multiple and shapes["epoch"] == 0
        assert shapes["batches"] == len(batches)
        assert shapes["distinct"] == len(Counter((len(b), b.src.shape[1], b.tgt_in.shape[1]) for b in batches))
    assert reported[8]["padding"] > reported[1]["padding"]  # (the fewer shapes: the sampler's tests, on more data)
    # resuming the multiple-8 run under another multiple would batch differently: refused, naming the setting
    again = load_run_config(None, tiny_overrides(tiny_data, tmp_path / "m8", "train.max_steps=3",
                                                 "train.length_multiple=16"))
    with pytest.raises(ValueError, match="length_multiple: saved 8 vs now 16"):
        Trainer(again).train()
    resumed = load_run_config(None, tiny_overrides(tiny_data, tmp_path / "m8", "train.max_steps=3",
                                                   "train.length_multiple=8"))
    Trainer(resumed).train()
    assert torch.load(tmp_path / "m8" / "last.pt", weights_only=False)["step"] == 3


def test_a_length_multiple_below_one_is_a_config_error(tmp_path, tiny_data):  # noqa: F811
    with pytest.raises(ValueError, match="train.length_multiple must be at least 1, got 0"):
        load_run_config(None, tiny_overrides(tiny_data, tmp_path, "train.length_multiple=0"))


def test_reduce_overhead_warns_past_torchs_limit_naming_the_count_and_the_setting():
    few = EpochShapes(Counter({(8, 16, 16): 3, **{(4, 24, n): 1 for n in range(8, 64, 8)}}), padding=0.2)
    many = EpochShapes(Counter({(n, 16, 16): 1 for n in range(1, 10)}), padding=0.05)
    assert few.distinct == 8 and many.distinct == 9
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_about_graph_recordings(few, 0, 8)  # within torch's own limit: quiet
    with pytest.warns(UserWarning, match=r"epoch 2 come in 9 distinct .*length_multiple = 1, padding 5\.0%"):
        warn_about_graph_recordings(many, 2, 1)
