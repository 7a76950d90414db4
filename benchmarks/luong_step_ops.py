"""The ATen ops one decoder step of the LSTM's Luong attention layer dispatches, forward and backward, fused against
reference, in both score forms: counted on CPU tensors below autograd (a ``TorchDispatchMode``), views and bare
allocations left out. On a GPU at the Luong step's sizes each op is about one kernel launch, and launches are what a
step costs there; this is the CPU's proxy for that count, not a measurement of it. The fused operators count one op
here; on the GPU the shared-value backward is its composition's ops (``tests/cpp/test_dispatch_budget.cpp``: 16, and 3
casts more in half precision) unless ``MMA_NMT_CUDA_KERNELS=handwritten`` takes its two-pass kernel (2 launches).

    python -m benchmarks.luong_step_ops
"""

from __future__ import annotations

import argparse
from collections import Counter

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from mma_nmt.modules import LuongAttentionConfig, LuongMultiheadAttention

# no kernel: views, metadata and bare allocations
NOT_LAUNCHES = {"view", "_unsafe_view", "_reshape_alias", "reshape", "as_strided", "expand", "transpose", "t",
                "permute", "select", "slice", "unsqueeze", "squeeze", "alias", "detach", "unbind", "split",
                "split_with_sizes", "empty", "empty_like", "empty_strided", "new_empty_strided", "lift_fresh"}


class OpCounter(TorchDispatchMode):
    """Counts the ops dispatched while active, by name, leaving out :data:`NOT_LAUNCHES`."""

    def __init__(self):
        super().__init__()
        self.ops: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.__name__.split(".")[0]
        if name not in NOT_LAUNCHES:
            self.ops[name] += 1
        return func(*args, **(kwargs or {}))


def step_ops(implementation: str, score_form: str, *, batch: int = 4, src_len: int = 9, hidden: int = 16,
             heads: int = 4) -> tuple[Counter, Counter]:
    """(forward, backward) op counts of one step (T = 1, memory precomputed outside) of a Luong layer with ``heads``
    heads, padded sources, a loss over both outputs (a~ feeds the softmax layer, a- the next step)."""
    torch.manual_seed(0)
    config = LuongAttentionConfig(hidden_dim=hidden, num_heads=heads, softmax_dim=2 * heads, feed_dim=4 * heads,
                                  implementation=implementation, score_form=score_form)
    module = LuongMultiheadAttention(config)
    states = torch.randn(batch, src_len, hidden, requires_grad=True)
    lengths = torch.arange(src_len, src_len - batch, -1).clamp(min=1)
    memory = module.precompute(states, key_lengths=lengths)
    h_t = torch.randn(batch, hidden, requires_grad=True)
    with OpCounter() as forward:
        a_tilde, a_bar, _ = module(h_t, memory)
    loss = a_tilde.sum() + a_bar.sum()
    with OpCounter() as backward:
        loss.backward()
    return forward.ops, backward.ops


def table() -> str:
    lines = ["| implementation | score form | forward ops | backward ops | forward + backward |", "|---|---|---|---|---|"]
    for implementation in ("reference", "fused"):
        for form in ("projected_keys", "projected_query"):
            forward, backward = step_ops(implementation, form)
            f, b = sum(forward.values()), sum(backward.values())
            lines.append(f"| {implementation} | {form} | {f} | {b} | {f + b} |")
    return "\n".join(lines)


def main(argv=None) -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    print(f"torch {torch.__version__}; one step (T = 1) of LuongMultiheadAttention, heads 4, CPU tensors\n")
    print(table())


if __name__ == "__main__":
    main()
