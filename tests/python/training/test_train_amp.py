"""``train.amp``: bfloat16 autocast trains on the CPU (the fused operators compute in float32 there, the linear layers
in bfloat16) and on CUDA; float16 keeps its GradScaler and is refused on the CPU; the parameters stay float32."""

from __future__ import annotations

import math
import warnings

import pytest
import torch

from mma_nmt.data import collate
from mma_nmt.training.config import load_run_config
from mma_nmt.training.precision import mixed_precision
from mma_nmt.training.trainer import Trainer
from nmt_fixtures import tiny_data, tiny_overrides  # noqa: F401  (fixture)


def _losses_on_one_batch(trainer: Trainer, steps: int) -> list[float]:
    batch = collate(trainer.train_data, next(iter(trainer.sampler)))
    losses = []
    for _ in range(steps):
        totals = trainer.train_step(batch)
        losses.append(float(totals[0] / totals[2]))
    return losses


def test_bf16_trains_a_tiny_mma_transformer_on_the_cpu(tmp_path, tiny_data):  # noqa: F811
    common = ["train.max_steps=100", "model.dropout=0.0", "model.attention_dropout=0.0"]
    trainer = Trainer(load_run_config(None, tiny_overrides(tiny_data, tmp_path / "bf16", *common, "train.amp=bf16")))
    assert trainer.scaler is None  # bfloat16 has float32's range: no loss scaling
    linear_outputs = []
    for module in trainer.model.modules():
        if isinstance(module, torch.nn.Linear):
            module.register_forward_hook(lambda m, args, out: linear_outputs.append(out.dtype))
    losses = _losses_on_one_batch(trainer, 8)

    assert all(math.isfinite(loss) for loss in losses), losses
    assert losses[-1] < losses[0] - 0.5, losses  # it learns the batch
    assert sum(b < a for a, b in zip(losses, losses[1:])) >= 6, losses
    assert set(linear_outputs) == {torch.bfloat16}, "the linear layers ran in bfloat16"
    assert all(p.dtype == torch.float32 for p in trainer.model.parameters())
    assert all(s["exp_avg"].dtype == torch.float32 for s in trainer.optimizer.state.values())

    float32 = Trainer(load_run_config(None, tiny_overrides(tiny_data, tmp_path / "fp32", *common)))
    reference = _losses_on_one_batch(float32, 1)
    assert losses[0] == pytest.approx(reference[0], abs=0.05)  # same model, same batch: bfloat16 rounding only


def test_a_bf16_run_trains_validates_and_checkpoints_float32_weights(tmp_path, tiny_data):  # noqa: F811
    save_dir = tmp_path / "run"
    result = Trainer(load_run_config(None, tiny_overrides(tiny_data, save_dir, "train.max_steps=3",
                                                          "train.amp=bf16"))).train()
    assert math.isfinite(result["valid_loss"])
    weights = torch.load(save_dir / "last.pt", weights_only=True)["model"]
    assert {t.dtype for t in weights.values() if t.is_floating_point()} == {torch.float32}


def test_fp16_on_the_cpu_is_refused_naming_bf16(tmp_path, tiny_data):  # noqa: F811
    run = load_run_config(None, tiny_overrides(tiny_data, tmp_path / "run", "train.max_steps=2", "train.amp=fp16"))
    with pytest.raises(ValueError, match=r"train.amp='fp16' .*needs CUDA.*train.amp='bf16'"):
        Trainer(run)
    assert not (tmp_path / "run").exists()  # refused before anything was written


def test_precision_on_cuda_bf16_without_scaler_fp16_with_one(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: True)
    bf16 = mixed_precision("bf16", torch.device("cuda"))
    assert (bf16.device_type, bf16.dtype, bf16.scaler) == ("cuda", torch.bfloat16, None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # without a GPU the scaler says it disables itself
        fp16 = mixed_precision("fp16", torch.device("cuda"))
    assert fp16.dtype == torch.float16 and isinstance(fp16.scaler, torch.amp.GradScaler)
    off = mixed_precision(False, torch.device("cuda"))
    assert off.dtype is None and off.scaler is None


def test_bf16_on_a_gpu_without_native_bfloat16_is_refused(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: including_emulation)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla V100-SXM2-16GB")
    with pytest.raises(ValueError, match=r"train.amp='bf16' needs a GPU with native bfloat16.*Tesla V100.*'fp16'"):
        mixed_precision("bf16", torch.device("cuda"))


@pytest.mark.cuda
@pytest.mark.parametrize("amp", ["bf16", "fp16"])
def test_mixed_precision_trains_on_cuda(tmp_path, tiny_data, amp):  # noqa: F811
    trainer = Trainer(load_run_config(None, tiny_overrides(tiny_data, tmp_path / amp, "train.max_steps=100",
                                                           "train.device=cuda", f"train.amp={amp}",
                                                           "model.dropout=0.0", "model.attention_dropout=0.0")))
    assert (trainer.scaler is not None) == (amp == "fp16")
    losses = _losses_on_one_batch(trainer, 8)
    assert all(math.isfinite(loss) for loss in losses) and losses[-1] < losses[0] - 0.5, losses
    assert all(p.dtype == torch.float32 for p in trainer.model.parameters())
