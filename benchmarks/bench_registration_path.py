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

Then self-attention through the ``nn.MultiheadAttention`` interface with a padding mask, ``MixedMultiheadAttention``
against ``nn.MultiheadAttention`` (the module's host work on top of the operator's), and one training step (forward,
label-smoothed loss, backward, Adam) of ``transformer_tiny`` with MMA heads run by
the fused operators, on a random padded batch (``--steps B:T ...``), with every operator's C++ autograd on and off
(``RegisteredOperator.native_eager`` cleared: the ``python`` path), rounds alternating, thread CPU time.

Rounds alternate between the paths; each takes ``torch.utils.benchmark.Timer.blocked_autorange`` (wall clock) and the
thread's CPU time over ``--calls`` calls (not counting time the thread waits for a core on a loaded machine). The table
gives the minimum over rounds (the least disturbed one on a shared machine) and the median, and each path's thread
CPU minimum against the ``python`` path's (wall time also counts the waits for a core on a loaded machine).

With ``--device cuda`` (a lent GPU; ``scripts/gpu_nmt_sizes.sh`` runs it) the same paths run in bfloat16 on the tiny
problem and at an NMT size (B 64, H 8, T = S = 64, D 64), timed by wall clock only (the timer synchronises the device;
a host thread waiting for the device spins, so its CPU time says nothing more), and no training step.

    python -m benchmarks.bench_registration_path [--rounds 7] [--steps 1:8 4:16] [--device cuda]
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.utils.benchmark import Timer

from mma_nmt.ops.registration import REGISTERED_OPERATORS

OPERATORS = ("attention", "shared_value_attention", "gmm_attention", "multilayer_attention", "multihop_gate",
             "multihop_second_hop")


@dataclass(frozen=True)
class Problem:
    batch: int
    heads: int
    length: int  # T = S
    head_dim: int
    components: int = 4  # K of GMM attention

    def __str__(self) -> str:
        return f"B {self.batch}, H {self.heads}, T = S = {self.length}, D {self.head_dim}"


TINY = Problem(batch=1, heads=4, length=16, head_dim=16)
NMT_SIZE = Problem(batch=64, heads=8, length=64, head_dim=64)  # 4k tokens, E 512


def schema_arguments(problem: Problem = TINY, device: str = "cpu", dtype: torch.dtype = torch.float32,
                     seed: int = 0) -> dict[str, tuple]:
    """The schema's arguments of the operators timed; differentiable leaves."""
    gen = torch.Generator().manual_seed(seed)
    batch, heads, length, head_dim = problem.batch, problem.heads, problem.length, problem.head_dim

    def leaf(*shape, positive=False, softmax=False):
        t = torch.randn(*shape, generator=gen)
        t = t.softmax(-1) if softmax else (t.abs() + 0.5 if positive else t)
        return t.to(device=device, dtype=dtype).requires_grad_()

    rows, mixture = (batch, heads, length), (batch, heads, length, problem.components)
    q, k, v = (leaf(*rows, head_dim) for _ in range(3))
    shared_v = leaf(batch, length, head_dim)
    lengths = torch.full((batch,), length, device=device)
    omega = leaf(*mixture, softmax=True)
    mu, sigma, gate = leaf(*mixture, positive=True), leaf(*mixture, positive=True), leaf(*rows, positive=True)
    embed, scale = heads * head_dim, head_dim ** -0.5
    layer_q, layer_k = [leaf(batch, length, embed) for _ in range(2)], [leaf(batch, length, embed) for _ in range(2)]
    layer_v = leaf(batch, length, embed)  # joint weights: one (summed) value set
    w_b, u_b, u_c, v_b = (leaf(head_dim, head_dim), leaf(heads, head_dim, head_dim), leaf(heads, head_dim, head_dim),
                          leaf(head_dim))
    kinds = [kind for kind in (0, 1, 2, 3) for _ in range(heads // 4)]  # GLFB stretched to the heads
    return {"attention": (q, k, v, lengths, kinds, 1, scale, 0, 0.0, 0, False, True),  # the encoder's self-attention
            "shared_value_attention": (q, k, shared_v, lengths, 1.0, False),
            "gmm_attention": (q, k, v, lengths, omega, mu, sigma, gate, None, None, scale, 0, 0.01, False),
            "multilayer_attention": (layer_q, layer_k, [layer_v], lengths, heads, scale, False, False),
            "multihop_gate": (q, k, v, v_b),
            "multihop_second_hop": (q, v, w_b, u_b, u_c, v_b)}


def step(call, args) -> None:
    call(*args)[0].sum().backward()


def paths(name: str, args: tuple) -> dict[str, object]:
    """The callables that run ``name``'s forward on the schema's arguments, by path."""
    operator = REGISTERED_OPERATORS[name]
    found = {"registered": operator.op,
             "python": operator.apply_python_autograd}
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


def time_paths(problem: Problem, device: str, dtype: torch.dtype, rounds: int, calls: int) -> None:
    """Prints the table of every operator's paths on ``problem``; rounds alternate between the paths."""
    inputs = schema_arguments(problem, device, dtype)
    cases = {(name, path): (call, inputs[name])
             for name in OPERATORS for path, call in paths(name, inputs[name]).items()}
    wall: dict[tuple, list[float]] = {key: [] for key in cases}
    cpu: dict[tuple, list[float]] = {key: [] for key in cases}
    on_cpu = device == "cpu"
    for _ in range(rounds):
        for key, (call, call_args) in cases.items():
            timer = Timer("step(call, args)", globals=dict(step=step, call=call, args=call_args))
            wall[key].append(timer.blocked_autorange(min_run_time=0.3).median * 1e6)
            if on_cpu:
                start = time.thread_time()
                for _ in range(calls):
                    step(call, call_args)
                cpu[key].append((time.thread_time() - start) / calls * 1e6)
    print(f"{problem}, {dtype} on {device}; torch {torch.__version__}, {rounds} rounds; forward + backward of "
          f"out.sum(), microseconds")
    print()
    if on_cpu:
        print("| operator | path | wall: min / median | thread CPU: min / median | thread CPU min / python's |")
        print("|---|---|---|---|---|")
    else:
        print("| operator | path | wall: min / median | wall min / python's |")
        print("|---|---|---|---|")
    for (name, path), samples in wall.items():
        row = f"| {name} | {path} | {min(samples):.0f} / {statistics.median(samples):.0f} | "
        if on_cpu:
            python = min(cpu[(name, "python")])
            row += (f"{min(cpu[(name, path)]):.0f} / {statistics.median(cpu[(name, path)]):.0f} | "
                    f"{min(cpu[(name, path)]) / python:.2f} |")
        else:
            row += f"{min(samples) / min(wall[(name, 'python')]):.2f} |"
        print(row)
    print()


@dataclass(frozen=True)
class DropinSize:
    batch: int
    length: int
    embed: int
    heads: int
    calls_per_300: int = 300  # calls per sample, of --calls 300


DROPIN_SIZES = (DropinSize(2, TINY.length, TINY.heads * TINY.head_dim, TINY.heads),
                DropinSize(16, 32, 512, 8, calls_per_300=10))


def time_dropin_modules(rounds: int, calls: int, sizes=DROPIN_SIZES) -> None:
    """Self-attention through the ``nn.MultiheadAttention`` interface, with a boolean right-padding
    ``key_padding_mask`` (its usual form): ``MixedMultiheadAttention`` (GLFB and all-global heads) against
    ``nn.MultiheadAttention``, forward and forward + backward, thread CPU time. The module's own host work (projections,
    reading the mask, head layout) shows here on top of the operator's at the tiny size; at the larger one, the memory
    traffic of head-layout copies too."""
    from mma_nmt.modules.mixed_multihead_attention import MixedMultiheadAttention

    for size in sizes:
        embed, batch, length = size.embed, size.batch, size.length
        size_calls = max(1, calls * size.calls_per_300 // 300)
        torch.manual_seed(0)
        modules = {"MixedMultiheadAttention GLFB": MixedMultiheadAttention(embed, size.heads, batch_first=True,
                                                                           head_spec="GLFB"),
                   "MixedMultiheadAttention G": MixedMultiheadAttention(embed, size.heads, batch_first=True,
                                                                        head_spec="G"),
                   "nn.MultiheadAttention": torch.nn.MultiheadAttention(embed, size.heads, batch_first=True)}
        x = torch.randn(batch, length, embed, requires_grad=True)
        lengths = torch.full((batch,), length)
        lengths[1::2] = length - 5
        mask = torch.arange(length) >= lengths.unsqueeze(1)  # (B, S) right padding

        def forward(module):
            return module(x, x, x, key_padding_mask=mask, need_weights=False)[0]

        work = {"forward": forward, "forward + backward": lambda module: forward(module).sum().backward()}
        times: dict[tuple, list[float]] = {(name, what): [] for name in modules for what in work}
        for _ in range(rounds):
            for (name, what), samples in times.items():
                module, call = modules[name], work[what]
                call(module)
                start = time.thread_time()
                for _ in range(size_calls):
                    call(module)
                samples.append((time.thread_time() - start) / size_calls * 1e6)
        print(f"B {batch}, H {size.heads}, T = S = {length}, E {embed}, lengths {length} and {length - 5} "
              f"alternating, float32 on cpu, one thread; microseconds of thread CPU time")
        print()
        print("| module | forward: min / median | forward + backward: min / median |")
        print("|---|---|---|")
        for name in modules:
            cells = [f"{min(times[(name, what)]):.0f} / {statistics.median(times[(name, what)]):.0f}" for what in work]
            print(f"| {name} | {' | '.join(cells)} |")
        print()


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--steps", nargs="*", default=["1:8", "4:16"], metavar="B:T",
                        help="training-step sizes (none: skip the training steps; on the CPU only)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--only-dropin", action="store_true", help="time the nn.MultiheadAttention drop-in only")
    args = parser.parse_args(argv)
    if args.device == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit("--device cuda: no CUDA device here")
        for problem in (TINY, NMT_SIZE):
            time_paths(problem, "cuda", torch.bfloat16, args.rounds, args.calls)
        return
    torch.set_num_threads(1)
    if args.only_dropin:
        time_dropin_modules(args.rounds, args.calls)
        return
    time_paths(TINY, "cpu", torch.float32, args.rounds, args.calls)
    time_dropin_modules(args.rounds, args.calls)
    time_training_steps([tuple(int(x) for x in size.split(":")) for size in args.steps], args.rounds)


if __name__ == "__main__":
    main()
