"""The host cost of one operator call without gradients (``torch.no_grad``: beam search, evaluation), where a decoder
step calls the attention operator once per layer and target position, on the tiny problem of
:mod:`benchmarks.bench_registration_path` (B = 1, H = 4, T = S = 16, D = 16, K = 4, one thread), through

- ``RegisteredOperator``: what the library's functions call: its guards, then the C++ Function (since 2026-12-01;
  without gradients until then the op below autograd);
- ``C++ Function``: the operator's C++ ``torch::autograd::Function`` (``csrc/eager/``, the path of eager calls with
  gradients), which records no graph without them;
- ``OpOverload below autograd``: ``torch.ops.mma_nmt.<name>.default`` under ``_AutoDispatchBelowAutograd`` alone;

rounds alternating, each the thread's CPU time per call over ``--calls`` calls; the table gives each path's minimum
over rounds. Results are the same tensors on every path (the same kernels on the same arguments). It decided, on
2026-12-01, that a call without gradients takes the C++ Function too: up to 7 us less than the op below autograd,
level at worst, on every operator in runs of 7, 9 and 15 rounds (``benchmarks/results/inference_call.cpu-1thread.md``).

    python -m benchmarks.bench_inference_call [--rounds 7] [--calls 2000]
"""

from __future__ import annotations

import argparse
import time

import torch

from benchmarks.bench_registration_path import OPERATORS, schema_arguments
from mma_nmt.ops.registration import REGISTERED_OPERATORS


def thread_seconds_per_call(call, args: tuple, calls: int) -> float:
    start = time.thread_time()
    for _ in range(calls):
        call(*args)
    return (time.thread_time() - start) / calls


def measure(rounds: int, calls: int) -> dict[str, dict[str, float]]:
    """Microseconds per call, the minimum over rounds, by operator and path."""
    arguments = schema_arguments()
    best: dict[str, dict[str, float]] = {}
    with torch.no_grad():
        for name in OPERATORS:
            operator, args = REGISTERED_OPERATORS[name], arguments[name]

            def below_autograd(*a, op=operator.op):
                with torch._C._AutoDispatchBelowAutograd():
                    return op(*a)
            paths = {"RegisteredOperator": operator, "C++ Function": operator.native_eager,
                     "OpOverload below autograd": below_autograd}
            for call in paths.values():
                assert all(torch.equal(x, y) for x, y in zip(call(*args), below_autograd(*args))
                           if isinstance(x, torch.Tensor))
            best[name] = {path: float("inf") for path in paths}
            for _ in range(rounds):
                for path, call in paths.items():
                    thread_seconds_per_call(call, args, calls // 10)  # warm-up
                    best[name][path] = min(best[name][path], thread_seconds_per_call(call, args, calls) * 1e6)
    return best


def render(best: dict[str, dict[str, float]]) -> str:
    paths = list(next(iter(best.values())))
    lines = ["| operator | " + " | ".join(f"{path} (us)" for path in paths) + " |", "|---" * (len(paths) + 1) + "|"]
    for name, times in best.items():
        lines.append(f"| `{name}` | " + " | ".join(f"{times[path]:.1f}" for path in paths) + " |")
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, one thread, no_grad, thread CPU time per call (minimum of {args.rounds} "
          f"rounds of {args.calls} calls)\n")
    print(render(measure(args.rounds, args.calls)))


if __name__ == "__main__":
    main()
