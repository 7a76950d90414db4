"""``scripts/gpu_nmt_sizes.sh`` and ``scripts/gpu_recheck.sh`` end to end with stand-ins for the GPU work, so that a
here and not on a lent machine: the real script and ``gpu_build.sh`` (the build reused) run in a scratch repository
where a stand-in ``python3`` runs pytest (prints a result), the benchmark (appends one row per call and records its
arguments), the LSTM step benchmark (prints a table), the benchmark suite and the training section alone (echo their
arguments) and every ``-c`` snippet (prints "stand-in")."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]

FAKE_PYTHON = """#!/bin/bash
if [ "$1" = -c ]; then echo "stand-in"; exit 0; fi
if [ "$1" = -m ] && [ "$2" = pytest ]; then echo "2 passed in 0.10s"; exit 0; fi
if [ "$1" = -m ] && [ "$2" = benchmarks.cuda_nmt_sizes ]; then
  shift 2; echo "$*" >> "$OUT/calls.txt"
  if [[ " $* " == *" --render "* ]]; then echo "# report" > "$OUT/bench/nmt_sizes.md"; exit 0; fi
  echo '{"group": "x"}' >> "$OUT/bench/nmt_sizes.jsonl"; exit 0
fi
if [ "$1" = -m ] && [ "$2" = benchmarks.cuda_lstm_step ]; then echo "| lstm |"; exit 0; fi
if [ "$1" = -m ] && [ "$2" = benchmarks.cuda_search ]; then shift 2; echo "search $*"; exit 0; fi
if [ "$1" = -m ] && [ "$2" = benchmarks.cuda_batch_shapes ]; then shift 2; echo "shapes $*"; exit 0; fi
if [ "$1" = -m ] && [ "$2" = benchmarks.cuda_training ]; then shift 2; printf '%s|' "$@"; exit 0; fi
if [ "$1" = -m ] && [ "$2" = benchmarks ]; then shift 2; echo "suite $*"; exit 0; fi
exec REAL_PYTHON "$@"
"""
# the CUDA suite's summary line, one pytest result per dispatch mode (the stand-in pytest prints "2 passed")
SUITE_LINE = "tests: 2 passed in 0.10s | handwritten: 2 passed in 0.10s | composition: 2 passed in 0.10s"


def _scratch_repository(tmp_path: Path, script: str, **variables: str) -> tuple[Path, Path, dict]:
    """(a scratch repository holding ``scripts/<script>`` and ``gpu_build.sh`` with a stand-in extension, the $OUT
    folder, the environment that puts the stand-in ``python3`` first and sets ``variables``)."""
    root, out = tmp_path / "repo", tmp_path / "out"
    (root / "scripts").mkdir(parents=True)
    for name in (script, "gpu_build.sh"):
        shutil.copy(REPO / "scripts" / name, root / "scripts")
    (root / "mma_nmt").mkdir()
    (root / "mma_nmt" / "_C.stand-in.so").write_text("")  # REUSE_BUILD=1 keeps it: no build
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(FAKE_PYTHON.replace("REAL_PYTHON", sys.executable))
    (bin_dir / "python3").chmod(0o755)
    out.mkdir()
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "OUT": str(out), "REUSE_BUILD": "1", **variables}
    return root, out, env


def _run_recheck(tmp_path: Path, **variables: str) -> tuple[Path, str]:
    """``scripts/gpu_recheck.sh`` run in a scratch repository with ``variables``: ($OUT, its session log)."""
    root, out, env = _scratch_repository(tmp_path, "gpu_recheck.sh", **variables)
    done = subprocess.run(["bash", "scripts/gpu_recheck.sh"], cwd=root, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return out, (out / "session.log").read_text()


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_tests_then_every_benchmark_group_in_priority_order_within_the_limit(tmp_path):
    root, out, env = _scratch_repository(tmp_path, "gpu_nmt_sizes.sh", LIMIT="400")

    done = subprocess.run(["bash", "scripts/gpu_nmt_sizes.sh"], cwd=root, env=env, capture_output=True, text=True,
                          timeout=240)

    assert done.returncode == 0, done.stdout + done.stderr
    session = (out / "session.log").read_text()
    steps = ["built: stand-in", "flash probe (flash_probe.log): 2 passed", SUITE_LINE,
             "nmt sizes bfloat16: exit 0, 1 rows",
             "graphs (decoder): exit 0", "LSTM step: exit 0", "LSTM step (projected query): exit 0",
             "training steps: exit 0", "flex: exit 0", "s] done"]
    positions = [session.find(step) for step in steps]
    assert -1 not in positions and positions == sorted(positions), session
    calls = (out / "calls.txt").read_text().splitlines()
    groups = [re.sub(r"--(out|deadline) \S+", "", c).split() for c in calls[:3]]  # each call's other arguments
    assert [" ".join(g) for g in groups] == [
        "--only attention --only decoder --only long", "--only decoder --graphs", "--only flex"]
    deadlines = [float(re.search(r"--deadline (\S+)", c).group(1)) for c in calls[:3]]
    assert all(0 < d < 400 for d in deadlines), deadlines
    assert calls[3].endswith("--render") and (out / "bench" / "nmt_sizes.md").exists()
    assert (out / "bench" / "lstm_step.md").read_text() == "| lstm |\n"
    assert (out / "bench" / "lstm_step_projected_query.md").read_text() == "| lstm |\n"
    assert (out / "bench" / "training.log").read_text().startswith("suite --device cuda --quick --only training")
    assert len(calls) == 4
    assert [json.loads(line) for line in (out / "bench" / "nmt_sizes.jsonl").read_text().splitlines()] == [
        {"group": "x"}] * 3


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_the_follow_up_lease_runs_tests_the_named_groups_then_the_training_steps(tmp_path):
    out, session = _run_recheck(tmp_path, LIMIT="300", NMT_GROUPS="decoder long", NMT_DTYPE="float32")
    steps = ["built: stand-in", SUITE_LINE,
             "nmt sizes (decoder long, float32): exit 0, 1 rows", "training steps: exit 0", "LSTM step: exit 0",
             "s] done"]
    positions = [session.find(step) for step in steps]
    assert -1 not in positions and positions == sorted(positions), session
    calls = (out / "calls.txt").read_text().splitlines()
    assert re.sub(r"--(out|deadline) \S+", "", calls[0]).split() == ["--only", "decoder", "--only", "long", "--dtype",
                                                                     "float32"]
    assert 0 < float(re.search(r"--deadline (\S+)", calls[0]).group(1)) < 300
    assert calls[1].endswith("--render") and len(calls) == 2
    assert (out / "bench" / "training.log").read_text().startswith("suite --device cuda --quick --only training")
    assert "compiled training steps" not in session and not (out / "bench" / "training_compiled.md").exists()
    assert "search (decode.compile)" not in session and not (out / "bench" / "search.md").exists()
    assert "batch shapes" not in session and not (out / "bench" / "batch_shapes.md").exists()


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_the_follow_up_lease_times_the_compiled_search_when_asked(tmp_path):
    out, session = _run_recheck(tmp_path, LIMIT="300", SEARCH="1")
    assert session.find("training steps: exit 0") < session.find("search (decode.compile): exit 0") < session.find(
        "LSTM step: exit 0"), session
    assert (out / "bench" / "search.md").read_text().strip() == "search --dtype bfloat16"


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_the_follow_up_lease_trains_on_the_named_batches_when_asked(tmp_path):
    out, session = _run_recheck(tmp_path, LIMIT="300", BATCH_SHAPES="runs/data/multi30k_de_en_bpe2k")
    assert session.find("training steps: exit 0") < session.find(
        "batch shapes (runs/data/multi30k_de_en_bpe2k): exit 0") < session.find("LSTM step: exit 0"), session
    assert (out / "bench" / "batch_shapes.md").read_text().strip() == (
        "shapes runs/data/multi30k_de_en_bpe2k --steps 100")


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_the_follow_up_lease_times_the_named_training_steps_compiled_when_asked(tmp_path):
    out, session = _run_recheck(tmp_path, LIMIT="300",
                                COMPILED_STEPS="transformer_iwslt_small MMA,lstm_iwslt15 own attention")
    assert session.find("training steps: exit 0") < session.find("compiled training steps") < session.find(
        "LSTM step: exit 0"), session
    arguments = (out / "bench" / "training_compiled.md").read_text().split("|")
    assert arguments[:5] == ["--quick", "--compile", "reduce-overhead", "--precision", "autocast bfloat16"]
    assert arguments[5:9] == ["--model", "transformer_iwslt_small MMA", "--model", "lstm_iwslt15 own attention"]
