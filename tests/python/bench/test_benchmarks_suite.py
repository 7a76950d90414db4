"""Smoke test of the benchmark suite (``python -m benchmarks``): every section runs at toy sizes and the report has
its structure. No timing is checked (speed is measured by the suite itself, never asserted in tests)."""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repository root holds the benchmarks package
from benchmarks.__main__ import main  # noqa: E402
from benchmarks.suite import SECTIONS  # noqa: E402
from benchmarks.targets import TARGETS  # noqa: E402


@pytest.fixture(scope="module")
def tiny_report(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MMA_NMT_BENCH_CACHE", str(out / "cache"))
        # glibc's defaults: "keep" would leave this pytest process holding up to 1 GiB of freed memory
        status = main(["--tiny", "--threads", "1", "--out", str(out), "--name", "smoke", "--malloc", "system"])
    return status, json.loads((out / "smoke.json").read_text()), (out / "smoke.md").read_text()


def test_every_section_runs_and_fills_its_tables(tiny_report):
    status, report, _ = tiny_report
    assert status == 0
    assert [s["name"] for s in report["sections"]] == list(SECTIONS)
    for section in report["sections"]:
        assert section["error"] is None, section["error"]
        assert section["tables"], section["name"]
        for table in section["tables"]:
            assert table["rows"] and all(len(row) == len(table["columns"]) for row in table["rows"]), table["title"]


def test_report_names_the_machine_and_the_build(tiny_report):
    _, report, markdown = tiny_report
    machine = report["machine"]
    for key in ("cpu_model", "cores", "torch_version", "torch_threads", "last_level_cache_mib", "load_average_start",
                "load_average_end"):
        assert machine[key] not in (None, "", []), key
    assert set(machine["mma_nmt_build"]) >= {"cuda", "torch_version", "cpu_kernel"}
    assert report["profile"] == "tiny"
    assert machine["malloc"] == "system defaults"
    assert "## Targets" in markdown and machine["cpu_model"] in markdown


def test_targets_table_has_every_target_with_a_status(tiny_report):
    _, report, _ = tiny_report
    assert [t["id"] for t in report["targets"]] == [t.id for t in TARGETS]
    assert {t["status"] for t in report["targets"]} <= {"met", "**missed**", "not measured"}
    measured = {t["id"] for t in report["targets"] if t["status"] != "not measured"}
    # at toy sizes only the length-128 figure of section b cannot be taken
    assert measured == {t.id for t in TARGETS} - {"mixed_vs_sdpa"}


def test_cold_timings_cycle_through_inputs_spanning_twice_the_cache():
    from benchmarks.machine import last_level_cache_bytes
    from benchmarks.section_scaling import SIZES, case_copies

    cache = last_level_cache_bytes()
    assert cache >= 2 ** 20
    sizes = SIZES["full"]
    for length in sizes.lengths:
        for backward, tensors in ((False, 4), (True, 8)):
            case_bytes = tensors * sizes.batch * sizes.heads * length * 64 * 4
            copies = case_copies(sizes, length, backward)
            assert copies >= 2 and copies * case_bytes >= 2 * cache
            assert (copies - 1) * case_bytes < 2 * cache or copies == 2  # no more than needed


def test_allocator_setting_takes_effect_under_glibc():
    code = "from benchmarks.allocator import keep_freed_memory; print(keep_freed_memory())"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                            cwd=Path(__file__).resolve().parents[3])
    assert result.stdout.strip() == ("True" if platform.libc_ver()[0] == "glibc" else "False")


def test_unknown_section_is_refused(capsys):
    with pytest.raises(SystemExit):
        main(["--only", "nonsense"])
    assert "invalid choice" in capsys.readouterr().err


def test_training_lengths_batches_have_the_asked_lengths():
    from benchmarks.bench_training_lengths import synthetic_batch
    from mma_nmt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID

    batch = synthetic_batch(sentences=5, length=12)
    assert batch.src.shape[0] == batch.tgt_in.shape[0] == len(batch) == 5
    assert batch.src.shape[1] <= 12 and batch.tgt_in.shape == batch.tgt_out.shape and batch.tgt_in.shape[1] <= 12
    assert ((batch.src_lengths >= 9) & (batch.src_lengths <= 12)).all()
    assert (batch.tgt_in[:, 0] == BOS_ID).all()
    rows = torch.arange(5)
    assert (batch.tgt_out[rows, batch.tgt_lengths - 1] == EOS_ID).all()
    assert (batch.src[rows, batch.src_lengths - 1] != PAD_ID).all()
    assert batch.num_tokens == int(batch.tgt_lengths.sum())


def test_training_lengths_script_runs_at_toy_sizes(capsys):
    from benchmarks import bench_training_lengths

    bench_training_lengths.main(["--preset", "transformer_tiny", "--lengths", "4", "8", "--tokens", "16",
                                 "--repeat", "1", "--models", "MMA", "GMM", "--threads", "1"])
    table = capsys.readouterr().out.split("\n\n")[-1]
    rows = [line for line in table.splitlines() if line.startswith("| transformer_tiny")]
    assert [row.split(" | ")[:2] for row in rows] == [["| transformer_tiny, MMA", "4"], ["| transformer_tiny, MMA", "8"],
                                                      ["| transformer_tiny, GMM", "4"], ["| transformer_tiny, GMM", "8"]]
