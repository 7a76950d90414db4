"""Data-parallel training through torchrun with the gloo backend on CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

from mma_nmt.data import ParallelDataset, collate
from mma_nmt.models import build_model
from mma_nmt.training.distributed import DistInfo
from mma_nmt.training.trainer import forward_backward
from nmt_fixtures import tiny_data, tiny_overrides, tiny_transformer  # noqa: F401  (fixture)

HERE = Path(__file__).resolve().parents[1]  # tests/python: ddp_gradient_worker.py and the fixtures it imports


def _torchrun(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1", "PYTHONFAULTHANDLER": "1"}  # an abort prints each rank's Python stack
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)


def test_two_process_gloo_gradients_match_single_process(tmp_path, tiny_data):  # noqa: F811
    out = tmp_path / "ddp.pt"
    result = _torchrun(str(HERE / "ddp_gradient_worker.py"), str(tiny_data), str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    ddp = torch.load(out, weights_only=True)

    data = ParallelDataset.load(tiny_data, "train")
    config = tiny_transformer(src_vocab_size=data.src_tokenizer.vocab_size,
                              tgt_vocab_size=data.tgt_tokenizer.vocab_size)
    torch.manual_seed(0)
    model = build_model(config)
    totals = forward_backward(model, collate(data, list(range(8))), epsilon=0.1, pad_id=0, info=DistInfo())
    torch.testing.assert_close(ddp["totals"], totals, rtol=1e-6, atol=0.0)  # float32 sums in another order
    for name, param in model.named_parameters():
        torch.testing.assert_close(ddp["grads"][name], param.grad, rtol=1e-5, atol=1e-7, msg=name)


def test_training_command_runs_under_torchrun(tmp_path, tiny_data):  # noqa: F811
    save_dir = tmp_path / "run"
    overrides = tiny_overrides(tiny_data, save_dir, "train.max_steps=4", "train.save_every=2")
    args = [item for o in overrides for item in ("--set", o)]
    result = _torchrun("-m", "mma_nmt", "train", *args)
    assert result.returncode == 0, result.stderr[-3000:]
    events = [json.loads(line) for line in (save_dir / "log.jsonl").open()]
    assert events[0]["world_size"] == 2 and events[-1]["event"] == "end" and events[-1]["step"] == 4
    checkpoint = torch.load(save_dir / "last.pt", weights_only=True)
    assert len(checkpoint["rng"]) == 2 and checkpoint["sampler"]["num_replicas"] == 2
