"""The host's share of a training step: the models of the CUDA training section (``cuda_training.py``: the MMA and
all-global Transformers against their ``nn.MultiheadAttention`` models, the GMM Transformer and the 4-head LSTM against
their reference models) at their preset's depth and head count but a width of 32 and a vocabulary of 64 words, so
that the CPU's arithmetic is small beside the work of issuing it: Python, the modules, autograd and the dispatcher.
Per forward and backward of one batch (no optimizer: Adam is a few foreach launches a step on a GPU), each pair in
interleaved rounds:

- thread CPU time, the host's work of a step;
- the ATen ops dispatched (``luong_step_ops.OpCounter``: views and bare allocations left out), about one kernel launch
  each on a GPU, where the same modules dispatch the same ops, with three exceptions: a fused operator counts one here
  and launches 1-4 kernels there (the shared-value backward's composition 16); torch's SDPA runs its CPU flash kernel
  here (one op, as a fused GPU kernel); and the LSTM's cells and its encoder decompose on the CPU into a few
  elementwise ops per gate and time step, where cuDNN runs the encoder in a few kernels and a decoder cell in two
  GEMMs and one fused kernel. So the LSTM's counts overstate the part of its step that is not attention.

Where a GPU step waits on its host (the H200 lease of 2026-11-29 found the training steps of
``2026-11-29.cuda-training.md`` so), the eager step ratio of a pair follows its host-work ratio, whatever the kernels
gain; CUDA graphs (``train.compile="reduce-overhead"``) take that work out of the step. A CPU proxy, not a GPU
measurement; the host times of a shared machine are noisy (``benchmarks/results/step_host_work.cpu-1thread.md``).

    python -m benchmarks.step_host_work [--rounds 9] [--only "lstm_iwslt15 own attention"]
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace

import torch

from benchmarks.cuda_training import SIZES, StepCase, random_batch
from benchmarks.luong_step_ops import OpCounter
from benchmarks.machine import cpu_model, git_commit, load_average
from benchmarks.timing import markdown_table
from mma_nmt.data.batch import Batch
from mma_nmt.models import build_model
from mma_nmt.models.config import LSTMConfig
from mma_nmt.training.loss import label_smoothed_cross_entropy

VOCAB, PAD = 64, 0  # the token ids of cuda_training.random_batch: 0 pads
WIDTH = 32
CASES = SIZES["quick"].models  # the CUDA training section's quick models, in its order
COLUMNS = ["model", "baseline", "fused host ms", "baseline host ms", "baseline / fused (host)", "fused ops",
           "baseline ops", "baseline / fused (ops)"]


def narrow(config):
    """``config`` at width WIDTH over VOCAB words: depth, heads, attention and dropout as the preset has them."""
    config = replace(config, src_vocab_size=VOCAB, tgt_vocab_size=VOCAB)
    if isinstance(config, LSTMConfig):
        return replace(config, embed_dim=WIDTH, hidden_size=WIDTH, softmax_dim=WIDTH // 2, feed_dim=WIDTH)
    return replace(config, d_model=WIDTH, ffn_dim=2 * WIDTH)


def small_batch(sentences: int, length: int, seed: int = 0) -> Batch:
    """Random sentences over a VOCAB-word vocabulary, lengths in [length / 2, length], on the CPU."""
    return random_batch(sentences, length, seed=seed, device="cpu", vocab=VOCAB)


def forward_backward_fn(config, batch: Batch):
    """Forward, label-smoothed loss and backward of a fresh model of ``config`` on ``batch`` (the trainer's step less
    its optimizer); gradients dropped after each call, so that none accumulates."""
    torch.manual_seed(0)
    model = build_model(config).train()

    def step():
        logits = model(batch.src, batch.src_lengths, batch.tgt_in)  # (B, T, V)
        loss, _ = label_smoothed_cross_entropy(logits.float(), batch.tgt_out, epsilon=0.1, ignore_index=PAD)
        loss.backward()
        for parameter in model.parameters():
            parameter.grad = None
    return step


def host_ms(steps, rounds: int) -> list[tuple[float, float]]:
    """(min, median) thread CPU milliseconds per call of each step, in ``rounds`` interleaved rounds of 3 calls."""
    for step in steps:
        step()  # first-call work (allocator, lazy initialisation) outside the rounds
    samples: list[list[float]] = [[] for _ in steps]
    for _ in range(rounds):
        for index, step in enumerate(steps):
            start = time.thread_time()
            for _ in range(3):
                step()
            samples[index].append((time.thread_time() - start) / 3 * 1e3)
    return [(min(s), statistics.median(s)) for s in samples]


def op_count(step) -> int:
    """ATen ops of one call of ``step`` (after a first call: lazy initialisation dispatches ops once)."""
    step()
    with OpCounter() as counter:
        step()
    return sum(counter.ops.values())


def step_ops(case: StepCase, implementation: str, batch: Batch) -> int:
    """ATen ops of one forward and backward of ``case``'s model in ``implementation`` at width WIDTH."""
    return op_count(forward_backward_fn(narrow(case.config(implementation)), batch))


def pair_row(case: StepCase, batch: Batch, rounds: int) -> list:
    fused, baseline = (forward_backward_fn(narrow(case.config(implementation)), batch)
                       for implementation in ("fused", case.baseline))
    (fused_min, fused_median), (baseline_min, baseline_median) = host_ms([fused, baseline], rounds)
    fused_ops, baseline_ops = op_count(fused), op_count(baseline)
    return [case.label, case.baseline, f"{fused_min:.1f} / {fused_median:.1f}",
            f"{baseline_min:.1f} / {baseline_median:.1f}", f"{baseline_min / fused_min:.2f}", fused_ops, baseline_ops,
            f"{baseline_ops / fused_ops:.2f}"]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--sentences", type=int, default=8)
    parser.add_argument("--length", type=int, default=16)
    parser.add_argument("--only", action="append", help="a model label of the CUDA training section (repeatable)")
    args = parser.parse_args(argv)
    unknown = set(args.only or ()) - {case.label for case in CASES}
    if unknown:
        parser.error(f"unknown --only {sorted(unknown)}; the models: {[case.label for case in CASES]}")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        batch = small_batch(args.sentences, args.length)
        rows = [pair_row(case, batch, args.rounds) for case in CASES if not args.only or case.label in args.only]
    finally:
        torch.set_num_threads(threads)
    print(f"{cpu_model()}, torch {torch.__version__}, commit {git_commit()}, load average {load_average()}; "
          f"one thread; width {WIDTH}, batch {args.sentences} sentences of up to {args.length} "
          f"tokens ({batch.num_tokens} target tokens); host ms: min / median of {args.rounds} rounds\n")
    print(markdown_table(COLUMNS, rows))


if __name__ == "__main__":
    main()
