"""``scripts/gpu_train_ahead.sh`` end to end with stand-ins for the GPU work, so that a mistake in its orchestration
shows here and not on a lent machine, whose 15 minutes a failed call spends: the real script, ``gpu_build.sh`` (the
build reused) and ``gpu_stage_runs.py`` run in a scratch repository where a stand-in ``python3`` trains (writes a
run's files and ends, or hangs until stopped) and runs pytest (prints a result)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]

# python3 as the script calls it: `-m mma_nmt experiment ... --system NAME` writes run NAME (validated at update 200,
# last.pt) and ends, or hangs when NAME is "hangs"; `-m pytest` prints a result and where the raw data are; `-c CODE`
# (the script's torch version and build lines) answers at once, so that no torch import on a loaded machine spends the
# deadline before the trainings start; anything else goes to the real interpreter.
FAKE_PYTHON = """#!/bin/bash
if [ "$1" = -m ] && [ "$2" = mma_nmt ]; then
  name=${@: -1}; run=runs/experiments/mini/corpus/$name
  mkdir -p "$run" && echo '{}' > "$run/cell.json" && head -c 3000 /dev/urandom > "$run/last.pt"
  echo '{"event": "valid", "step": 200, "best": true, "valid_nll": 2.5}' > "$run/log.jsonl"
  echo "trained $name"
  [ "$name" = hangs ] && exec sleep 120
  exit 0
fi
if [ "$1" = -c ]; then
  echo "stand-in for: $2"; exit 0
fi
if [ "$1" = -m ] && [ "$2" = pytest ]; then
  echo "data: $MMA_NMT_DATA_DIR"; echo "2 passed in 0.10s"; exit 0
fi
exec REAL_PYTHON "$@"
"""


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_trains_runs_tests_and_a_side_command_then_stages_the_unfinished_runs(tmp_path):
    root, out = tmp_path / "repo", tmp_path / "out"
    (root / "scripts").mkdir(parents=True)
    for script in ("gpu_train_ahead.sh", "gpu_build.sh", "gpu_stage_runs.py"):
        shutil.copy(REPO / "scripts" / script, root / "scripts")
    (root / "mma_nmt").mkdir()
    (root / "mma_nmt" / "_C.stand-in.so").write_text("")  # REUSE_BUILD=1 keeps it: no build
    (root / "runs" / "data" / "raw" / "multi30k").mkdir(parents=True)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(FAKE_PYTHON.replace("REAL_PYTHON", sys.executable))
    (bin_dir / "python3").chmod(0o755)
    out.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "MMA_NMT_DATA_DIR"}
    env.update(PATH=f"{bin_dir}:{env['PATH']}", OUT=str(out), REUSE_BUILD="1", DEADLINE="10", CUDA_TESTS="1",
               BESIDE="echo probe table")

    done = subprocess.run(["bash", "scripts/gpu_train_ahead.sh", "x --system ends", "x --system hangs"], cwd=root,
                          env=env, capture_output=True, text=True, timeout=90)

    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(p.name for p in out.iterdir()) == ["ends__last.pt.part00", "hangs__last.pt.part00",
                                                     "runs_state.tgz"]
    with tarfile.open(out / "runs_state.tgz") as tar:
        logs = {Path(m.name).name: tar.extractfile(m).read().decode() for m in tar.getmembers()
                if m.name.startswith("gpu_logs/") and m.isfile()}
    # the three dispatch modes, given the carried raw data
    for name in ("test_cuda.log", "test_cuda_handwritten.log", "test_cuda_composition.log"):
        assert logs[name].splitlines() == [f"data: {root / 'runs' / 'data' / 'raw'}", "2 passed in 0.10s", "exit 0"]
    assert logs["beside.log"] == "probe table\n"
    assert logs["train1.log"] == "trained ends\n" and logs["train2.log"] == "trained hangs\n"
    session = logs["session.log"]
    assert "CUDA tests: 2 passed in 0.10s | handwritten: 2 passed in 0.10s | composition: 2 passed in 0.10s" in session
    assert "trainings stopped" in session and "staging" in session
