"""The cost of the two autograd paths of :mod:`mma_nmt.ops.registration` on a tiny problem, where the Python around the
kernels shows: one forward and backward of ``out.sum()`` (B = 1, H = 4, T = S = 16, D = 16, K = 4, one thread) through

- the registered operator itself (``torch.library.register_autograd``'s generic wrapper: what ``torch.compile``,
  ``torch.func`` and direct calls of ``torch.ops.mma_nmt.*`` use), and
- the eager fast path (:class:`~mma_nmt.ops.registration.RegisteredOperator` called: the same ``setup_context`` and
  backward as an ``autograd.Function`` around the op below autograd; its guards included).

Rounds alternate between the paths; each takes ``torch.utils.benchmark.Timer.blocked_autorange`` (wall clock) and the
thread's CPU time over ``--calls`` calls (not counting time the thread waits for a core on a loaded machine). The table
gives the minimum over rounds (the least disturbed one on a shared machine) and the median.

    python -m benchmarks.bench_registration_path [--rounds 7]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch.utils.benchmark import Timer

from mma_nmt.ops.registration import REGISTERED_OPERATORS

BATCH, HEADS, LENGTH, HEAD_DIM, COMPONENTS = 1, 4, 16, 16, 4


def schema_arguments(seed: int = 0) -> dict[str, tuple]:
    """The schema's arguments of ``attention`` and ``gmm_attention`` on the tiny problem; differentiable leaves."""
    gen = torch.Generator().manual_seed(seed)

    def leaf(*shape, positive=False):
        t = torch.randn(*shape, generator=gen)
        return (t.abs() + 0.5 if positive else t).requires_grad_()

    rows, mixture = (BATCH, HEADS, LENGTH), (BATCH, HEADS, LENGTH, COMPONENTS)
    q, k, v = (leaf(*rows, HEAD_DIM) for _ in range(3))
    lengths = torch.tensor([LENGTH])
    omega = torch.softmax(torch.randn(*mixture, generator=gen), -1).requires_grad_()
    mu, sigma, gate = leaf(*mixture, positive=True), leaf(*mixture, positive=True), leaf(*rows, positive=True)
    return {"attention": (q, k, v, lengths, [0, 1, 2, 3], 1, 0.25, 0, 0.0, 0, False),
            "gmm_attention": (q, k, v, lengths, omega, mu, sigma, gate, None, None, 0.25, 0, 0.01, False)}


def step(call, args) -> None:
    call(*args)[0].sum().backward()


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    registered = {name: REGISTERED_OPERATORS[name] for name in ("attention", "gmm_attention")}
    inputs = schema_arguments()
    paths = {(name, path): (operator.op if path == "registered" else operator, inputs[name])
             for name, operator in registered.items() for path in ("registered", "fast")}
    wall: dict[tuple, list[float]] = {key: [] for key in paths}
    cpu: dict[tuple, list[float]] = {key: [] for key in paths}
    for _ in range(args.rounds):
        for key, (call, call_args) in paths.items():
            timer = Timer("step(call, args)", globals=dict(step=step, call=call, args=call_args))
            wall[key].append(timer.blocked_autorange(min_run_time=0.3).median * 1e6)
            start = time.thread_time()
            for _ in range(args.calls):
                step(call, call_args)
            cpu[key].append((time.thread_time() - start) / args.calls * 1e6)
    print("| operator | clock | registered autograd: min / median us | fast path: min / median us | min saved |")
    print("|---|---|---|---|---|")
    for name in registered:
        for clock, samples in (("wall", wall), ("thread CPU", cpu)):
            slow, fast = samples[(name, "registered")], samples[(name, "fast")]
            print(f"| {name} | {clock} | {min(slow):.0f} / {statistics.median(slow):.0f} | {min(fast):.0f} / "
                  f"{statistics.median(fast):.0f} | {1 - min(fast) / min(slow):.0%} |")


if __name__ == "__main__":
    main()
