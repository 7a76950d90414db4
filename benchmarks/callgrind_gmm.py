"""Driver for instruction counts of the GMM operator under callgrind (exact where wall-clock time on a shared machine is
not). It runs ``--warmup`` calls and then ``--calls`` timed-style calls of one pass, on one thread; the per-call count is
the difference of two runs with different ``--calls`` divided by the difference of calls, which removes the start-up
(interpreter, imports, first-call initialisation). Valgrind cannot execute AVX-512, so cap both ATen and the extension
at AVX2::

    ATEN_CPU_CAPABILITY=avx2 MMA_NMT_CPU_ISA=avx2 valgrind --tool=callgrind --callgrind-out-file=cg.%p \\
        python -m benchmarks.callgrind_gmm --pass fwd --impl fused --calls 10

``callgrind_annotate --inclusive=yes cg.<pid>`` then splits the total into the C++ op (``gmm_attention_cpu``,
``gmm_attention_backward_cpu``) and everything around it (Python wrapper, dispatcher, autograd).
"""

from __future__ import annotations

import argparse

import torch

from benchmarks.bench_gmm_attention import forward_fn, make_inputs
from benchmarks.timing import timed_call


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pass", dest="pass_", choices=("fwd", "fwd+bwd"), default="fwd")
    parser.add_argument("--impl", choices=("fused", "reference"), default="fused")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--length", type=int, default=16)
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    inputs = make_inputs(args.batch, args.length)
    leaves = [t for t in inputs.values() if isinstance(t, torch.Tensor) and t.requires_grad]
    call = timed_call(forward_fn(args.impl, inputs), args.pass_ == "fwd+bwd", leaves)
    for _ in range(args.warmup + args.calls):
        call()


if __name__ == "__main__":
    main()
