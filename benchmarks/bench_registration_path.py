"""The cost of the autograd paths of :mod:`mma_nmt.ops.registration` on a tiny problem, where the host code around the
kernels shows: one forward and backward of ``out.sum()`` of every operator (B = 1, H = 4, T = S = 16, D = 16, K = 4,
two encoder layers, one thread) through

- ``registered``: the registered operator itself (``torch.library.register_autograd``'s generic wrapper: what
  ``torch.compile``, ``torch.func`` and direct calls of ``torch.ops.mma_nmt.*`` use);
- ``python``: the same ``setup_context`` and backward as a Python ``autograd.Function`` around the op below autograd
  (the eager fast path of every operator without a C++ one);
- ``c++``: the same formula as a C++ ``torch::autograd::Function`` (``csrc/eager/``; the eager fast path where one is
  written), called through :class:`~mma_nmt.ops.registration.RegisteredOperator` with its guards;
- ``sdpa``: for scale, ``torch.nn.functional.scaled_dot_product_attention`` on the same q, k, v (attention) -- what
  a user would call instead, with its own C++ autograd; its CPU kernel does the work of a global head.

Then one training step (forward, label-smoothed loss, backward, Adam) of ``transformer_tiny`` with MMA heads run by
the fused operators, on a random padded batch (``--steps B:T ...``), with every operator's C++ autograd on and off
(``RegisteredOperator.native_eager`` cleared: the ``python`` path), rounds alternating, thread CPU time.

Rounds alternate between the paths; each takes ``torch.utils.benchmark.Timer.blocked_autorange`` (wall clock) and the
thread's CPU time over ``--calls`` calls (not counting time the thread waits for a core on a loaded machine). The table
gives the minimum over rounds (the least disturbed one on a shared machine) and the median, and each path's thread
CPU minimum against the ``python`` path's (wall time also counts the waits for a core on a loaded machine).

    python -m benchmarks.bench_registration_path [--rounds 7] [--steps 1:8 4:16]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F
from torch.utils.benchmark import Timer

from mma_nmt.ops.registration import REGISTERED_OPERATORS

BATCH, HEADS, LENGTH, HEAD_DIM, COMPONENTS = 1, 4, 16, 16, 4
OPERATORS = ("attention", "shared_value_attention", "gmm_attention", "multilayer_attention", "multihop_gate",
             "multihop_second_hop")


def schema_arguments(seed: int = 0) -> dict[str, tuple]:
    """The schema's arguments of the operators timed, on the tiny problem; differentiable leaves."""
    gen = torch.Generator().manual_seed(seed)

    def leaf(*shape, positive=False):
        t = torch.randn(*shape, generator=gen)
        return (t.abs() + 0.5 if positive else t).requires_grad_()

    rows, mixture = (BATCH, HEADS, LENGTH), (BATCH, HEADS, LENGTH, COMPONENTS)
    q, k, v = (leaf(*rows, HEAD_DIM) for _ in range(3))
    shared_v = leaf(BATCH, LENGTH, HEAD_DIM)
    lengths = torch.tensor([LENGTH])
    omega = torch.softmax(torch.randn(*mixture, generator=gen), -1).requires_grad_()
    mu, sigma, gate = leaf(*mixture, positive=True), leaf(*mixture, positive=True), leaf(*rows, positive=True)
    embed = HEADS * HEAD_DIM
    layer_q, layer_k = [leaf(BATCH, LENGTH, embed) for _ in range(2)], [leaf(BATCH, LENGTH, embed) for _ in range(2)]
    layer_v = leaf(BATCH, LENGTH, embed)  # joint weights: one (summed) value set
    w_b, u_b, u_c, v_b = (leaf(HEAD_DIM, HEAD_DIM), leaf(HEADS, HEAD_DIM, HEAD_DIM), leaf(HEADS, HEAD_DIM, HEAD_DIM),
                          leaf(HEAD_DIM))
    return {"attention": (q, k, v, lengths, [0, 1, 2, 3], 1, 0.25, 0, 0.0, 0, False),
            "shared_value_attention": (q, k, shared_v, lengths, 1.0, False),
            "gmm_attention": (q, k, v, lengths, omega, mu, sigma, gate, None, None, 0.25, 0, 0.01, False),
            "multilayer_attention": (layer_q, layer_k, [layer_v], lengths, HEADS, 0.25, False, False),
            "multihop_gate": (q, k, v, v_b),
            "multihop_second_hop": (q, v, w_b, u_b, u_c, v_b)}


def step(call, args) -> None:
    call(*args)[0].sum().backward()


def _flattened(args: tuple) -> tuple:
    """``autograd.Function.apply``'s arguments: the sizes of the Tensor[] arguments, then every argument spread."""
    sizes = tuple(len(arg) if isinstance(arg, list) else None for arg in args)
    return (sizes, *(t for arg in args for t in (arg if isinstance(arg, list) else [arg])))


def paths(name: str, args: tuple) -> dict[str, object]:
    """The callables that run ``name``'s forward on the schema's arguments, by path."""
    operator = REGISTERED_OPERATORS[name]
    found = {"registered": operator.op,
             "python": lambda *a: operator.eager_function.apply(*_flattened(a))}
    if operator.native_eager is not None:
        found["c++"] = operator
    if name == "attention":
        found["sdpa"] = lambda q, k, v, *_: (F.scaled_dot_product_attention(q, k, v),)
    return found


def training_step(batch: int, length: int):
    """One training step of transformer_tiny (MMA heads, fused) on a random batch, lengths in [length / 2, length]."""
    from benchmarks.section_end_to_end import config_for_vocab
    from mma_nmt.models import build_model
    from mma_nmt.training.loss import label_smoothed_cross_entropy

    config = config_for_vocab("transformer_tiny", "MMA", "fused", src_vocab=1000, tgt_vocab=1000, pad_id=0)
    torch.manual_seed(0)
    model = build_model(config).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    gen = torch.Generator().manual_seed(1)
    lengths = torch.randint(length // 2, length + 1, (batch,), generator=gen)
    lengths[0] = length
    src = torch.randint(4, 1000, (batch, length), generator=gen)
    src[torch.arange(length) >= lengths.unsqueeze(1)] = config.pad_id  # (B, T) right padding
    tgt_in, tgt_out = (torch.randint(4, 1000, (batch, length), generator=gen) for _ in range(2))

    def step():
        optimizer.zero_grad(set_to_none=True)
        logits = model(src, lengths, tgt_in)  # (B, T, V)
        loss, _ = label_smoothed_cross_entropy(logits, tgt_out, epsilon=0.1, ignore_index=config.pad_id)
        loss.backward()
        optimizer.step()

    return step


def time_training_steps(sizes: list[tuple[int, int]], rounds: int, calls: int = 10) -> None:
    native = {name: operator.native_eager for name, operator in REGISTERED_OPERATORS.items()}
    print()
    print("| transformer_tiny MMA step | python autograd: min / median ms | C++ autograd: min / median ms | "
          "min / python's |")
    print("|---|---|---|---|")
    for batch, length in sizes:
        step = training_step(batch, length)
        times: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(rounds):
            for with_cpp in (False, True):
                for name, operator in REGISTERED_OPERATORS.items():
                    operator.native_eager = native[name] if with_cpp else None
                step()  # warm
                start = time.thread_time()
                for _ in range(calls):
                    step()
                times[with_cpp].append((time.thread_time() - start) / calls * 1e3)
        for name, operator in REGISTERED_OPERATORS.items():
            operator.native_eager = native[name]
        python, cpp = times[False], times[True]
        print(f"| B {batch}, T {length} | {min(python):.2f} / {statistics.median(python):.2f} | "
              f"{min(cpp):.2f} / {statistics.median(cpp):.2f} | {min(cpp) / min(python):.3f} |")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--steps", nargs="*", default=["1:8", "4:16"], metavar="B:T",
                        help="training-step sizes (none: skip the training steps)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    inputs = schema_arguments()
    cases = {(name, path): (call, inputs[name])
             for name in OPERATORS for path, call in paths(name, inputs[name]).items()}
    wall: dict[tuple, list[float]] = {key: [] for key in cases}
    cpu: dict[tuple, list[float]] = {key: [] for key in cases}
    for _ in range(args.rounds):
        for key, (call, call_args) in cases.items():
            timer = Timer("step(call, args)", globals=dict(step=step, call=call, args=call_args))
            wall[key].append(timer.blocked_autorange(min_run_time=0.3).median * 1e6)
            start = time.thread_time()
            for _ in range(args.calls):
                step(call, call_args)
            cpu[key].append((time.thread_time() - start) / args.calls * 1e6)
    print(f"torch {torch.__version__}, {args.rounds} rounds; forward + backward of out.sum(), microseconds")
    print()
    print("| operator | path | wall: min / median | thread CPU: min / median | thread CPU min / python's |")
    print("|---|---|---|---|---|")
    for (name, path), samples in wall.items():
        python = min(cpu[(name, "python")])
        print(f"| {name} | {path} | {min(samples):.0f} / {statistics.median(samples):.0f} | "
              f"{min(cpu[(name, path)]):.0f} / {statistics.median(cpu[(name, path)]):.0f} | "
              f"{min(cpu[(name, path)]) / python:.2f} |")
    time_training_steps([tuple(int(x) for x in size.split(":")) for size in args.steps], args.rounds)


if __name__ == "__main__":
    main()
