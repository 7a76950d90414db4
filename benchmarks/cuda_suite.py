"""The GPU half of the benchmark suite (``python -m benchmarks --device cuda``): every fused operator against its
reference, attention against SDPA (flash, and with a mask), compiled FlexAttention and ``nn.MultiheadAttention``, and a
whole-model training step, in float16, bfloat16 and float32. Its targets (issue 22) are in ``CUDA_TARGETS``.

Runs only on a machine with a GPU and the CUDA build of mma_nmt; elsewhere :func:`require_cuda` says what is missing.
"""

from __future__ import annotations

import time
from typing import Callable

import torch

import mma_nmt
from benchmarks import cuda_attention, cuda_operators, cuda_training
from benchmarks.machine import load_average, machine_info
from benchmarks.profiles import check_profile
from benchmarks.report import Report, Section
from benchmarks.suite import run_section
from benchmarks.targets import Target, evaluate

CUDA_SECTIONS: dict[str, Callable[[str], Section]] = {
    "operators": cuda_operators.run,
    "attention": cuda_attention.run,
    "training": cuda_training.run,
}

CUDA_TARGETS = (
    Target("cuda_vs_reference", "Every operator at least as fast as its reference (CUDA)", 1.0, "x",
           "section operators, reference / fused, every operator, dtype and pass"),
    Target("cuda_global_vs_flash", "Global heads within 0.9x of SDPA-flash (CUDA)", 0.9, "x",
           "section attention, SDPA-flash / fused, global heads, float16 and bfloat16, fwd and fwd+bwd"),
    Target("cuda_mixed_vs_flex", "Mixed GLFB heads at least as fast as FlexAttention, forward+backward (CUDA)", 1.0,
           "x", "section attention, Flex / fused, GLFB heads, fwd+bwd"),
    Target("cuda_train_vs_torch", "Training step with fused operators >= the nn.MultiheadAttention model (CUDA)", 1.0,
           "x", "section training, torch step time / fused step time"),
    Target("cuda_train_vs_reference", "GMM and LSTM training steps fused >= 1.2x their reference models (CUDA)", 1.2,
           "x", "section training, reference step time / fused step time"),
)


def require_cuda() -> None:
    reason = mma_nmt.cuda_unavailable_reason()
    if reason is not None:
        raise SystemExit(f"python -m benchmarks --device cuda: {reason}. Run it on a machine with a GPU.")


def gpu_info() -> dict:
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return {"gpu": props.name, "gpu_memory_gib": round(props.total_memory / 2 ** 30, 1),
            "gpu_capability": f"{props.major}.{props.minor}", "cuda_version": torch.version.cuda}


def run_cuda_suite(profile: str, only: list[str] | None = None, *, command: str, log=print) -> Report:
    check_profile(profile)
    names = list(CUDA_SECTIONS) if not only else only
    unknown = [n for n in names if n not in CUDA_SECTIONS]
    if unknown:
        raise ValueError(f"unknown CUDA section(s) {unknown}; known: {list(CUDA_SECTIONS)}")
    require_cuda()
    machine = {**machine_info(), **gpu_info()}
    start = time.perf_counter()
    sections = [run_section(name, profile, log=log, sections=CUDA_SECTIONS) for name in names]
    machine["load_average_end"] = load_average()
    return Report(title=f"mma_nmt CUDA benchmarks on {machine['gpu']}, {time.strftime('%Y-%m-%d')}", machine=machine,
                  command=command, profile=profile, sections=sections, targets=evaluate(sections, CUDA_TARGETS),
                  seconds=time.perf_counter() - start)
