"""Section "roofline": attained GFLOP/s of the fused global attention forward next to float32 matrix multiplies
measured in the same interleaved rounds: the batched product of the same size (what QK^T costs through
``torch.matmul``) and a square GEMM (close to the machine's float32 peak through oneDNN/MKL). "Distance to the
limit" = fused GFLOP/s / matmul GFLOP/s."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from benchmarks.profiles import TIMING
from benchmarks.report import Section, Table
from benchmarks.timing import time_interleaved
from mma_nmt.ops import fused_attention

COLUMNS = ["B", "H", "T=S", "fused global fwd GFLOP/s", "batched matmul GFLOP/s", "square GEMM GFLOP/s",
           "fused / batched matmul", "fused / square GEMM", "fused / faster matmul"]


@dataclass(frozen=True)
class Sizes:
    batch: int
    heads: int
    lengths: tuple
    gemm: int  # side of the square GEMM


SIZES = {
    "full": Sizes(batch=32, heads=8, lengths=(128, 256, 512), gemm=1024),
    "quick": Sizes(batch=32, heads=8, lengths=(128, 512), gemm=1024),
    "tiny": Sizes(batch=2, heads=4, lengths=(16,), gemm=64),
}
HEAD_DIM = 64


def measure(batch: int, heads: int, length: int, gemm: int, **timing) -> list:
    """One row: GFLOP/s of the three contenders at one length, timed side by side (forward, no grad)."""
    q, k, v = (torch.randn(batch, heads, length, HEAD_DIM) for _ in range(3))
    a = torch.randn(batch * heads, length, HEAD_DIM)  # (B*H, T, D)
    b = torch.randn(batch * heads, HEAD_DIM, length)  # (B*H, D, S)
    x, y = torch.randn(gemm, gemm), torch.randn(gemm, gemm)
    with torch.no_grad():
        seconds = time_interleaved([lambda: fused_attention(q, k, v).out, lambda: torch.matmul(a, b),
                                    lambda: torch.matmul(x, y)], **timing)
    flops = [4 * batch * heads * length * length * HEAD_DIM,  # QK^T and PV, 2 flops per multiply-add each
             2 * batch * heads * length * length * HEAD_DIM, 2 * gemm ** 3]
    fused, batched, square = (f / s / 1e9 for f, s in zip(flops, seconds))
    shares = (fused / batched, fused / square, fused / max(batched, square))
    return [batch, heads, length, fused, batched, square, *(f"{100 * share:.0f}%" for share in shares)]


def run(profile: str) -> Section:
    sizes, timing = SIZES[profile], TIMING[profile].kwargs()
    section = Section("roofline", "c. Distance to the limit: fused global attention forward vs matrix multiply", (
        f"Flops counted for the fused forward: 4·B·H·T·S·D (QK^T and PV; softmax not counted), D = {HEAD_DIM}, no "
        f"padding, all heads global. Batched matmul: (B·H, T, D) × (B·H, D, S), 2·B·H·T·S·D flops. Square GEMM: "
        f"{sizes.gemm}×{sizes.gemm}×{sizes.gemm}. The three are interleaved in the same rounds. The batched product "
        f"writes a (B·H, T, S) result, so at long lengths it is bound by memory traffic (which the fused kernel "
        f"avoids); the limit is therefore the faster of the two matmuls, usually the square GEMM."))
    rows = [measure(sizes.batch, sizes.heads, length, sizes.gemm, **timing) for length in sizes.lengths]
    for row in rows:
        section.figure("global_fraction", row[3] / max(row[4], row[5]), f"B={row[0]} H={row[1]} T=S={row[2]}")
    section.tables.append(Table("GFLOP/s, same run", COLUMNS, rows))
    return section
