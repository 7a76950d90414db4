"""Fused GMM cross-attention vs the plain-PyTorch reference at the paper's base-model shapes (8 heads, head size 64,
K = 4, source = target length 16..256): forward and forward+backward time ratios, and the peak memory of one
forward+backward, measured in a fresh subprocess (growth of VmHWM over VmRSS), next to the size of one T x S x K float32
tensor. The default batch is 8 rather than the paper's 32 because the reference is slow on a small shared machine;
``--batch 32`` runs the paper's size.

    python -m benchmarks.bench_gmm_attention [--quick] [--batch 8] [--lengths 16 64 256] [--threads 1] [--no-memory]
"""

from __future__ import annotations

import argparse

import torch

from benchmarks.memory import peak_growth_mib, run_child
from benchmarks.timing import markdown_table, speedup_rows, time_interleaved
from mma_nmt.ops import gmm_attention, gmm_conversion
from mma_nmt.reference import gmm_attention_reference

HEADS, HEAD_DIM, COMPONENTS = 8, 64, 4


def make_inputs(batch: int, length: int, seed: int = 0) -> dict:
    """Operator inputs (B, H, T=length, ...) with source lengths between length/2 and length; differentiable leaves."""
    gen = torch.Generator().manual_seed(seed)
    shape = (batch, HEADS, length)
    lengths = torch.randint(max(1, length // 2), length + 1, (batch,), generator=gen)
    lengths[0] = length
    hats = [torch.randn(*shape, COMPONENTS, generator=gen) for _ in range(3)]
    omega, mu, sigma = gmm_conversion.approximate_mixture(*hats, source_lengths=lengths)
    inputs = dict(q=torch.randn(*shape, HEAD_DIM, generator=gen), k=torch.randn(*shape, HEAD_DIM, generator=gen),
                  v=torch.randn(*shape, HEAD_DIM, generator=gen), omega=omega, mu=mu, sigma=sigma,
                  gate=torch.sigmoid(torch.randn(*shape, generator=gen)))
    inputs = {name: t.contiguous().requires_grad_() for name, t in inputs.items()}
    inputs["key_lengths"] = lengths
    return inputs


def forward_fn(impl: str, inputs: dict):
    if impl == "fused":
        return lambda: gmm_attention(**inputs).out
    return lambda: gmm_attention_reference(**inputs)[0]


def train_step_fn(impl: str, inputs: dict):
    forward = forward_fn(impl, inputs)
    leaves = [t for t in inputs.values() if isinstance(t, torch.Tensor) and t.requires_grad]

    def step():
        out = forward()
        torch.autograd.grad(out, leaves, torch.ones_like(out))

    return step


def peak_memory_mb(impl: str, batch: int, length: int) -> float:
    """Peak resident memory above the inputs during one forward+backward, in a fresh process (see ``memory``)."""
    return run_child("benchmarks.bench_gmm_attention:_memory_child", impl, batch, length)


def _memory_child(impl: str, batch: int, length: int) -> float:
    torch.set_num_threads(1)
    train_step_fn(impl, make_inputs(1, 4))()  # one-time lazy initialisation (autograd engine, thread pools)
    return peak_growth_mib(train_step_fn(impl, make_inputs(batch, length)))


def speedup_rows_at(batch: int, length: int, *, repeat: int, **timing) -> list[list[object]]:
    """The suite's rows (see ``timing.speedup_rows``): the operator vs its reference, forward and forward+backward."""
    inputs = make_inputs(batch, length)
    leaves = [t for t in inputs.values() if isinstance(t, torch.Tensor) and t.requires_grad]
    pairs = {"gmm_attention op": (forward_fn("fused", inputs), forward_fn("reference", inputs))}
    return speedup_rows(f"GMM B={batch} H={HEADS} K={COMPONENTS} T=S={length}", pairs, leaves, repeat=repeat,
                        **timing)


def measure(batch: int, length: int, repeat: int, memory: bool = True) -> list:
    inputs = make_inputs(batch, length)
    with torch.no_grad():
        fwd_fused, fwd_ref = time_interleaved([forward_fn("fused", inputs), forward_fn("reference", inputs)],
                                              repeat=repeat, warmup=1, min_seconds=0.2)
    both_fused, both_ref = time_interleaved([train_step_fn("fused", inputs), train_step_fn("reference", inputs)],
                                            repeat=repeat, warmup=1, min_seconds=0.2)
    tsk_mb = batch * HEADS * length * length * COMPONENTS * 4 / 2**20
    mem_ref, mem_fused = ((peak_memory_mb("reference", batch, length), peak_memory_mb("fused", batch, length)) if memory
                          else ("-", "-"))
    return [length, batch, fwd_ref * 1e3, fwd_fused * 1e3, fwd_ref / fwd_fused, both_ref * 1e3, both_fused * 1e3,
            both_ref / both_fused, mem_ref, mem_fused, tsk_mb]


def main(argv=None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="batch 2, lengths 16 and 64, fewer repeats")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--lengths", type=int, nargs="+", default=[16, 32, 64, 128, 256])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory subprocesses (times only)")
    args = parser.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    batch, lengths, repeat = (2, [16, 64], 3) if args.quick else (args.batch, args.lengths, args.repeat)
    rows = [measure(batch, length, repeat, memory=not args.no_memory) for length in lengths]
    header = ["T=S", "batch", "fwd ref ms", "fwd fused ms", "fwd x", "fwd+bwd ref ms", "fwd+bwd fused ms",
              "fwd+bwd x", "peak MiB ref", "peak MiB fused", "one TxSxK f32 MiB"]
    table = markdown_table(header, rows)
    print(f"threads={torch.get_num_threads()}, heads={HEADS}, head_dim={HEAD_DIM}, K={COMPONENTS}, float32\n")
    print(table)
    return table


if __name__ == "__main__":
    main()
