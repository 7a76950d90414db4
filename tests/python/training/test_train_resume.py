"""Exact resumption: a training process killed with SIGKILL and restarted ends with bit-identical parameters."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap

import torch

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
