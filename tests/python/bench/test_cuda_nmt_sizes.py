"""What of ``python -m benchmarks.cuda_nmt_sizes`` can be checked without a GPU: every contender of a case computes the
same attention (so a ratio compares equal work), a contender that fails is reported by its row while the others are
timed, rows reach the JSON-lines file as each case ends, and the deadline stops new cases."""

from __future__ import annotations

import json

import pytest
import torch

from benchmarks import cuda_nmt_sizes
from benchmarks.cuda_nmt_sizes import Case, cases, measure, render, run

TINY = cases("tiny")


def _as_tuple(out):
    return out if isinstance(out, tuple) else (out,)


@pytest.mark.parametrize("case", TINY, ids=lambda c: f"{c.what} {c.shape}")
def test_every_contender_of_a_case_computes_the_same_output(case):
    calls, leaves = case.make("cpu", torch.float64)
    assert {"ours default", "ours handwritten", "reference"} <= set(calls)
    expected = _as_tuple(calls["reference"]())
    for name, call in calls.items():
        for got, want in zip(_as_tuple(call()), expected):
            torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-9, msg=f"{name} differs from the reference")
    assert all(leaf.requires_grad for leaf in leaves)


def _nodes_of_one_call(outputs) -> list:
    """The autograd nodes a call's outputs reach, but the leaves' gradient accumulators (which belong to the leaves)."""
    stack, seen, nodes = [o.grad_fn for o in outputs], set(), []
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        nodes.append(node)
        stack.extend(next_node for next_node, _ in node.next_functions)
    return [n for n in nodes if type(n).__name__ != "AccumulateGrad"]


@pytest.mark.parametrize("case", TINY, ids=lambda c: f"{c.what} {c.shape}")
def test_no_autograd_node_outlives_a_call(case):
    """A CUDA graph captures a call's backward only if every node of its graph was made inside the capture: a node
    made before (a head view taken once at set-up) sits on the default stream, which the backward then waits on."""
    calls, _ = case.make("cpu", torch.float64)
    for name, call in calls.items():
        first, second = _as_tuple(call()), _as_tuple(call())  # both graphs alive: a shared node keeps its id
        first_nodes, second_nodes = _nodes_of_one_call(first), _nodes_of_one_call(second)
        assert first_nodes, f"{name}: no autograd graph"
        shared = {id(n) for n in first_nodes} & {id(n) for n in second_nodes}
        assert not shared, f"{name}: nodes made before the call: {[type(n).__name__ for n in first_nodes if id(n) in shared]}"


def test_the_nmt_groups_hold_the_issues_sizes():
    shapes = {c.shape for c in cases("attention")}
    for batch, length in cuda_nmt_sizes.NMT_CORE:
        assert f"B={batch} T=S={length} H=8 D=64" in shapes
    assert {c.shape for c in cases("attention_h4")} >= {"B=64 T=S=64 H=4 D=128"}
    assert {c.what for c in cases("decoder")} >= {"gmm_attention", "gmm_attention step", "shared_value_attention",
                                                  "multihop_gate", "multihop_second_hop", "multilayer_attention",
                                                  "attention step C"}
    assert cases("decoder")[-1].what.startswith("attention step")  # last: a failed graph capture spoils the rest


def test_a_failing_contender_is_reported_and_the_others_are_timed():
    good = cases("tiny")[0]

    def make(device, dtype):
        calls, leaves = good.make(device, dtype)
        calls["broken"] = lambda: (_ for _ in ()).throw(RuntimeError("no kernel for this\nsecond line"))
        return calls, leaves

    rows = measure(Case("tiny", good.what, good.shape, make), "cpu", torch.float64)
    broken = [r for r in rows if r["contender"] == "broken"]
    assert [r["error"] for r in broken] == ["RuntimeError: no kernel for this"] * 2
    # all-G: flash is a contender; float64: the compositions too
    assert {r["contender"] for r in rows if "ms" in r} == {"ours default", "ours handwritten", "ours rows", "ours flash",
                                                           "ours composition", "reference", "SDPA+mask"}


def test_rows_are_written_per_case_and_the_deadline_stops_new_cases(tmp_path, monkeypatch):
    monkeypatch.setattr(cuda_nmt_sizes, "cases", lambda group: TINY[:2])
    lines = []
    assert run(["tiny"], tmp_path, device="cpu", dtype=torch.float64, deadline=None, graphs=False,
               log=lines.append) == 2
    rows = [json.loads(line) for line in (tmp_path / "nmt_sizes.jsonl").read_text().splitlines()]
    assert len(rows) == 2 * 2 * 7  # cases x passes x contenders
    report = render(tmp_path)
    assert "## tiny, float64" in report and report.count("| ours default |") == 4
    assert run(["tiny"], tmp_path / "late", device="cpu", dtype=torch.float64, deadline=-1, graphs=False,
               log=lines.append) == 0
    assert "deadline reached" in lines[-1]
