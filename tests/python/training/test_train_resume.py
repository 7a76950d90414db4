"""Exact resumption: a training process killed with SIGKILL and restarted ends with bit-identical parameters."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import textwrap

import pytest
import torch

from mma_nmt.training.config import load_run_config
from mma_nmt.training.trainer import Trainer
from nmt_fixtures import tiny_data, tiny_overrides  # noqa: F401  (fixture)

CHILD = textwrap.dedent("""
    import json, os, signal, sys
    from mma_nmt.training.config import load_run_config
    from mma_nmt.training.trainer import Trainer

    overrides, kill_at = json.loads(sys.argv[1]), int(sys.argv[2])

    def kill_self(trainer):
        if trainer.step == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    Trainer(load_run_config(None, overrides), hooks=(kill_self,)).train()
""")


def _train(script, overrides, kill_at=0):
    return subprocess.run([sys.executable, str(script), json.dumps(overrides), str(kill_at)], capture_output=True,
                          text=True, timeout=600)


def test_resume_after_kill_gives_bit_identical_parameters(tmp_path, tiny_data):  # noqa: F811
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    common = ["train.max_steps=14", "train.save_every=4", "model.dropout=0.2", "model.attention_dropout=0.1"]
    straight = _train(script, tiny_overrides(tiny_data, tmp_path / "straight", *common))
    assert straight.returncode == 0, straight.stderr[-3000:]

    resumed_dir = tmp_path / "resumed"
    killed = _train(script, tiny_overrides(tiny_data, resumed_dir, *common), kill_at=10)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert torch.load(resumed_dir / "last.pt", weights_only=True)["step"] == 8
    finished = _train(script, tiny_overrides(tiny_data, resumed_dir, *common))
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert any(json.loads(line)["event"] == "resume" for line in (resumed_dir / "log.jsonl").open())

    a = torch.load(tmp_path / "straight" / "last.pt", weights_only=True)
    b = torch.load(resumed_dir / "last.pt", weights_only=True)
    assert a["step"] == b["step"] == 14
    assert a["sampler"] == b["sampler"]
    for name, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][name]), name
    for index, state in a["optimizer"]["state"].items():
        assert torch.equal(state["exp_avg_sq"], b["optimizer"]["state"][index]["exp_avg_sq"])


@pytest.mark.cuda
def test_a_run_checkpointed_on_cuda_resumes_on_cuda_and_on_cpu(tmp_path, tiny_data):  # noqa: F811
    """A checkpoint's tensors are mapped to the device of the run that resumes it, its RNG states too; the generators
    take theirs back as CPU tensors (resuming on CUDA failed with "RNG state must be a torch.ByteTensor" until
    2026-11-27). A run begun on a GPU and carried on on a CPU resumes as well."""
    def train(save_dir, device: str, steps: int) -> None:
        overrides = tiny_overrides(tiny_data, save_dir, f"train.max_steps={steps}", "train.save_every=3",
                                   "model.dropout=0.2", f"train.device={device}")
        Trainer(load_run_config(None, overrides)).train()

    on_gpu = tmp_path / "gpu"
    train(on_gpu, "cuda", 3)
    shutil.copytree(on_gpu, tmp_path / "then_cpu")
    for save_dir, device in ((on_gpu, "cuda"), (tmp_path / "then_cpu", "cpu")):
        train(save_dir, device, 6)
        events = [json.loads(line) for line in (save_dir / "log.jsonl").open()]
        assert [e["step"] for e in events if e["event"] == "resume"] == [3], device
        starts = [e["hardware"]["device"] for e in events if e["event"] == "start"]
        assert starts == ["cuda", device]
        assert torch.load(save_dir / "last.pt", weights_only=True, map_location="cpu")["step"] == 6
