"""The end of a data-parallel command: NCCL's process group is destroyed (PyTorch's shutdown guide; NCCL warns at exit
otherwise), gloo's is left to the interpreter (pytorch/gloo#155), and one process touches nothing."""

from __future__ import annotations

import pytest

from mma_nmt import pipeline
from mma_nmt.training import distributed, trainer
from mma_nmt.training.config import RunConfig
from mma_nmt.training.distributed import DistInfo, leave_process_group


class FakeProcessGroup:
    """Stands for torch.distributed with one default group of ``backend``; records what was destroyed."""

    def __init__(self, backend: str, initialized: bool = True):
        self.backend, self.initialized, self.destroyed = backend, initialized, 0

    def is_initialized(self) -> bool:
        return self.initialized

    def get_backend(self) -> str:
        return self.backend

    def destroy_process_group(self) -> None:
        self.destroyed += 1
        self.initialized = False


TWO_RANKS = DistInfo(rank=1, world_size=2, local_rank=1)


@pytest.mark.parametrize("backend, destroyed", [("nccl", 1), ("gloo", 0)])
def test_only_an_nccl_group_is_destroyed(monkeypatch, backend, destroyed):
    group = FakeProcessGroup(backend)
    monkeypatch.setattr(distributed, "dist", group)
    leave_process_group(TWO_RANKS)
    assert group.destroyed == destroyed
    leave_process_group(TWO_RANKS)  # a second call finds no group and does nothing
    assert group.destroyed == destroyed


@pytest.mark.parametrize("info, initialized", [(DistInfo(), True), (TWO_RANKS, False)])
def test_one_process_or_no_group_touches_nothing(monkeypatch, info, initialized):
    group = FakeProcessGroup("nccl", initialized=initialized)
    monkeypatch.setattr(distributed, "dist", group)
    leave_process_group(info)
    assert group.destroyed == 0


def test_the_train_command_leaves_the_group_after_writing_its_run_config(monkeypatch, tmp_path):
    events = []

    class FinishedTrainer:
        def __init__(self, run):
            self.info = TWO_RANKS

        def train(self):
            events.append("trained")
            return {"step": 4}

    def leave(info):
        events.append(("left", info, (tmp_path / "run_config.json").is_file()))

    monkeypatch.setattr(pipeline, "ensure_prepared", lambda run: None)
    monkeypatch.setattr(trainer, "Trainer", FinishedTrainer)
    monkeypatch.setattr(distributed, "leave_process_group", leave)
    run = RunConfig()
    run.train.save_dir = str(tmp_path)
    assert pipeline.train(run) == {"step": 4}
    assert events == ["trained", ("left", TWO_RANKS, True)]


def test_a_failed_training_raises_and_keeps_the_group(monkeypatch, tmp_path):
    """An exception from training propagates untouched: the group is not destroyed under ranks that may still be in a
    collective (torchrun then ends them)."""
    left = []

    class FailingTrainer:
        def __init__(self, run):
            self.info = TWO_RANKS

        def train(self):
            raise RuntimeError("diverged")

    monkeypatch.setattr(pipeline, "ensure_prepared", lambda run: None)
    monkeypatch.setattr(trainer, "Trainer", FailingTrainer)
    monkeypatch.setattr(distributed, "leave_process_group", left.append)
    run = RunConfig()
    run.train.save_dir = str(tmp_path)
    with pytest.raises(RuntimeError, match="diverged"):
        pipeline.train(run)
    assert left == []
