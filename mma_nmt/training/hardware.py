"""The machine a training process runs on, as logged in its ``start`` event and kept in run records: a run trained in
segments (killed and resumed, or begun on a lent GPU and finished on a CPU) says where each segment ran."""

from __future__ import annotations

import os
import platform
from pathlib import Path


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def hardware(device: str = "cpu", threads: int = 0) -> dict:
    """CPU model and cores, the torch threads, and the GPU when ``device`` is a CUDA device."""
    import torch

    info = {"machine": platform.machine(), "cpu": cpu_model(), "cpu_cores": os.cpu_count(),
            "torch_threads": threads or torch.get_num_threads(), "device": device}
    if device.startswith("cuda") and torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def hardware_name(info: dict) -> str:
    """``info`` (:func:`hardware`) in a few words: the GPU's name, or the CPU's and its torch threads."""
    return info.get("gpu") or f"{info.get('cpu', '?')}, {info.get('torch_threads', '?')} thread(s)"


__all__ = ["cpu_model", "hardware", "hardware_name"]
