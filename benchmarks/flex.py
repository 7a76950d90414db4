"""FlexAttention (``torch.nn.attention.flex_attention`` through ``torch.compile``) as a contender of the mixed-head
benchmarks: the head kinds become a ``mask_mod`` and a block mask, so fully masked blocks are skipped as in our kernels.

On CPU, FlexAttention runs only forward (torch 2.13 raises ``NotImplementedError`` for inputs that require grad) and
its first compile of a shape builds a large C++ kernel through inductor, which takes minutes on a small machine. So the
suite first compiles in a child process under a time limit (:func:`warm_up`); that fills inductor's on-disk cache,
and the compile in the measuring process then reuses it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import torch

from mma_nmt.ops.head_spec import HeadKind

REPO = Path(__file__).resolve().parent.parent
_compiled = None


def compiled_flex_attention():
    """One compiled ``flex_attention`` per process (static shapes: each shape compiles once)."""
    global _compiled
    if _compiled is None:
        from torch.nn.attention.flex_attention import flex_attention
        _compiled = torch.compile(flex_attention, dynamic=False)
    return _compiled


def mask_mod_for(head_kinds, window: int, key_lengths: torch.Tensor):
    """The visibility rule of SPEC section 1 per head, plus key padding, as a FlexAttention ``mask_mod``."""
    kinds = torch.as_tensor(list(head_kinds), dtype=torch.int64, device=key_lengths.device)  # (H,)

    def mask_mod(b, h, q_idx, kv_idx):
        kind = kinds[h]
        seen = ((kind == HeadKind.GLOBAL)
                | ((kind == HeadKind.LOCAL) & ((q_idx - kv_idx).abs() <= window))
                | ((kind == HeadKind.FORWARD) & (kv_idx >= q_idx))
                | (((kind == HeadKind.BACKWARD) | (kind == HeadKind.CAUSAL)) & (kv_idx <= q_idx)))
        return seen & (kv_idx < key_lengths[b])

    return mask_mod


def flex_forward(q, k, v, *, head_kinds, window: int, key_lengths: torch.Tensor) -> Callable[[], torch.Tensor]:
    """A forward call of compiled FlexAttention on (B, H, T, D) inputs; the block mask is built here, once."""
    from torch.nn.attention.flex_attention import create_block_mask

    batch, heads, length, _ = q.shape
    block_mask = create_block_mask(mask_mod_for(head_kinds, window, key_lengths), batch, heads, length, k.shape[2],
                                   device="cpu")
    flex = compiled_flex_attention()
    return lambda: flex(q, k, v, block_mask=block_mask)


def _child(batch: int, heads: int, length: int, head_dim: int) -> None:
    """Compiles and runs one forward (what :func:`warm_up` runs in a child process)."""
    q, k, v = (torch.randn(batch, heads, length, head_dim) for _ in range(3))
    lengths = torch.full((batch,), length)
    flex_forward(q, k, v, head_kinds=[0, 1, 2, 3] * (heads // 4) or [0] * heads, window=1, key_lengths=lengths)()


def warm_up(batch: int, heads: int, length: int, head_dim: int, *, timeout: float) -> tuple[bool, str]:
    """Compiles FlexAttention for one shape in a child process (its own process group, killed whole on timeout).
    Returns (usable, what happened)."""
    code = f"from benchmarks.flex import _child; _child({batch}, {heads}, {length}, {head_dim})"
    env = {**os.environ, "TORCHINDUCTOR_COMPILE_THREADS": "1"}
    start = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=env, cwd=REPO, start_new_session=True)
    try:
        _, err = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)  # the child and the compilers it started
        child.communicate()
        return False, f"the first compile did not finish within {timeout:.0f} s (cold inductor cache)"
    seconds = time.perf_counter() - start
    if child.returncode != 0:
        last = [line for line in err.strip().splitlines() if line.strip()][-1:] or ["no message"]
        return False, f"cannot run here: {last[0][:300]}"
    return True, f"compiled and ran in a child process in {seconds:.0f} s"
