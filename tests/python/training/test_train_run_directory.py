"""A training run owns its directory and refuses to run on nothing (issue 19, items 0, 6, 7 and 9): one run per
``save_dir`` (an fcntl lock that dies with its holder), no silent restart over existing checkpoints, no endless loop on
a split without usable pairs, and ``train.compile`` trains like eager."""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from mma_nmt.data import PrepareConfig, prepare
from mma_nmt.training.config import load_run_config
from mma_nmt.training.run_lock import RunDirectoryBusy, RunDirectoryLock
from mma_nmt.training.trainer import Trainer
from nmt_fixtures import MULTI30K, tiny_data, tiny_overrides  # noqa: F401  (fixture)


def _run(tiny_data, save_dir, *extra):
    return load_run_config(None, tiny_overrides(tiny_data, save_dir, "train.save_every=2", *extra))


def _step(path) -> int:
    return torch.load(path, weights_only=True)["step"]


def test_fresh_start_refuses_a_directory_with_checkpoints(tiny_data, tmp_path):
    Trainer(_run(tiny_data, tmp_path, "train.max_steps=4")).train()
    best_before = (tmp_path / "best.pt").read_bytes()
    with pytest.raises(ValueError, match=rf"{tmp_path} already holds checkpoints .*best.pt.*--overwrite"):
        Trainer(_run(tiny_data, tmp_path, "train.max_steps=2", "train.resume=false")).train()
    assert (tmp_path / "best.pt").read_bytes() == best_before and _step(tmp_path / "last.pt") == 4


def test_overwrite_starts_over(tiny_data, tmp_path):
    Trainer(_run(tiny_data, tmp_path, "train.max_steps=4")).train()
    Trainer(_run(tiny_data, tmp_path, "train.max_steps=2", "train.resume=false", "train.overwrite=true")).train()
    assert _step(tmp_path / "last.pt") == 2 and not (tmp_path / "step_4.pt").exists()
    log = [json.loads(line) for line in (tmp_path / "log.jsonl").open()]
    assert sorted(e["path"] for e in log if e["event"] == "overwrite") == sorted(
        str(tmp_path / name) for name in ("best.pt", "last.pt", "step_2.pt", "step_4.pt"))


def test_a_second_run_in_the_same_directory_fails_fast_with_the_holders_pid(tiny_data, tmp_path):
    with RunDirectoryLock(tmp_path):
        trainer = Trainer(_run(tiny_data, tmp_path, "train.max_steps=2"))
        busy = rf"{tmp_path} is in use by another training run \(PID {os.getpid()}\)"
        with pytest.raises(RunDirectoryBusy, match=busy):
            trainer.train()
    assert not list(tmp_path.glob("*.pt"))  # the refused run wrote nothing
    trainer.train()  # the lock is free again
    assert _step(tmp_path / "last.pt") == 2


def test_the_lock_dies_with_a_killed_holder(tmp_path):
    script = ("import sys, time\nfrom mma_nmt.training.run_lock import RunDirectoryLock\n"
              "lock = RunDirectoryLock(sys.argv[1])\nlock.acquire()\nprint('held', flush=True)\ntime.sleep(600)\n")
    holder = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(RunDirectoryBusy, match=f"PID {holder.pid}"):
            RunDirectoryLock(tmp_path).acquire()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    deadline = time.monotonic() + 10
    while True:  # the kernel drops the lock when the process is gone; no stale lock to remove by hand
        try:
            with RunDirectoryLock(tmp_path):
                break
        except RunDirectoryBusy:
            assert time.monotonic() < deadline
            time.sleep(0.05)


def test_a_train_split_without_usable_pairs_fails_at_start_with_the_counts(tiny_data, tmp_path):
    with pytest.raises(ValueError, match=r"train split .* no usable pair: 50 pairs, 50 of them longer than "
                                         r"train.max_len=1"):
        Trainer(_run(tiny_data, tmp_path, "train.max_steps=2", "train.max_len=1"))


def test_prepare_refuses_to_write_an_empty_split(tmp_path):
    with pytest.raises(ValueError, match=r"split 'train' of .* would be empty: 50 pairs read, 0 malformed, 50 longer "
                                         r"than data.max_len=1 .*nothing written"):
        prepare(PrepareConfig(corpus="multi30k_de_en", data_dir=str(MULTI30K.parent), out_dir=str(tmp_path / "data"),
                              vocab_size=320, max_train_lines=50, max_len=1, splits=("train", "valid"), progress=False))
    assert not list((tmp_path / "data").glob("train.*"))


@pytest.mark.parametrize("family", ["transformer", "lstm"])
def test_compiled_training_matches_eager(family, tiny_data, tmp_path, monkeypatch):
    """``train.compile`` trains through ``torch.compile``, the Transformer whole and the LSTM by its decoder step
    (``LSTMModel.compile_decoder_step``); aot_eager stands in for inductor (the whole-step inductor comparison is in
    test_compile_training.py) to keep this test at seconds."""
    from mma_nmt.models.lstm_step import LSTMStepFunction

    lstm = ["model.preset=lstm_tiny", "model.embed_dim=16", "model.hidden_size=16", "model.softmax_dim=16",
            "model.feed_dim=8"]

    def run(save_dir, *extra):
        if family == "transformer":
            return _run(tiny_data, save_dir, *extra)
        return load_run_config(None, tiny_overrides(tiny_data, save_dir, "train.save_every=2", *extra, model=lstm))

    calls = []

    def compile_with_aot_eager(module, **kwargs):
        calls.append(module)
        return torch._dynamo.optimize("aot_eager")(module)

    Trainer(run(tmp_path / "eager", "train.max_steps=3")).train()
    monkeypatch.setattr(torch, "compile", compile_with_aot_eager)
    torch._dynamo.reset()
    trainer = Trainer(run(tmp_path / "compiled", "train.max_steps=3", "train.compile=true"))
    trainer.train()
    if family == "lstm":
        assert trainer.train_model is trainer.ddp and [type(c) for c in calls] == [LSTMStepFunction]
    else:
        assert calls == [trainer.ddp]
    eager = torch.load(tmp_path / "eager" / "last.pt", weights_only=True)["model"]
    compiled = torch.load(tmp_path / "compiled" / "last.pt", weights_only=True)["model"]
    for name, weight in eager.items():
        torch.testing.assert_close(compiled[name], weight, rtol=1e-4, atol=1e-6, msg=functools.partial(
            lambda name, message: f"{name}: {message}", name))


def test_a_run_refused_by_the_lock_writes_nothing_into_the_running_jobs_log(tiny_data, tmp_path):
    """A second run that would resume the running job's checkpoint is refused by the lock before it writes anything:
    no ``resume`` event of its own in the job's ``log.jsonl`` (issue 50, case 17)."""
    Trainer(_run(tiny_data, tmp_path, "train.max_steps=2")).train()
    log_before = (tmp_path / "log.jsonl").read_bytes()
    with RunDirectoryLock(tmp_path):  # the running job
        with pytest.raises(RunDirectoryBusy):
            Trainer(_run(tiny_data, tmp_path, "train.max_steps=4")).train()
    assert (tmp_path / "log.jsonl").read_bytes() == log_before
