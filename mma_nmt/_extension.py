"""Loads the native extension ``mma_nmt._C`` and explains a mismatch with the installed torch instead of failing obscurely."""

from __future__ import annotations

import warnings

import torch

_REBUILD = "Rebuild it against the installed torch: pip install --no-build-isolation --force-reinstall ."

try:
    from mma_nmt import _C
except ImportError as error:  # an undefined symbol here almost always means another torch was installed after building
    raise ImportError(
        f"mma_nmt: the native extension mma_nmt._C could not be loaded with torch {torch.__version__}: {error}. {_REBUILD}"
    ) from error


def build_info() -> dict:
    """How the extension was built: ``cuda`` (CUDA kernels compiled), ``torch_version`` (torch it was built against) and
    ``cpu_kernel`` (the instruction set of the CPU kernels in use on this machine)."""
    return dict(_C.build_info())


def cuda_unavailable_reason() -> str | None:
    """Why the CUDA operators cannot run here (no GPU visible, or a build without CUDA kernels), or None when they can.
    The CUDA test suite and the CUDA benchmarks both ask this."""
    if not torch.cuda.is_available():
        return "no GPU is visible to torch (torch.cuda.is_available() is False)"
    if not build_info()["cuda"]:
        return "mma_nmt was built without its CUDA kernels; rebuild it against a CUDA build of torch with nvcc on PATH"
    return None


def _check_torch_version() -> None:
    built = build_info()["torch_version"]
    running = torch.__version__.split("+")[0]
    if built != running:
        warnings.warn(
            f"mma_nmt was built against torch {built} but torch {running} is installed; operators may misbehave. {_REBUILD}",
            RuntimeWarning,
            stacklevel=3,
        )


def require_device_support(tensor: torch.Tensor, op_name: str) -> None:
    """Raises a clear error when ``tensor`` lives on a device this build has no kernels for."""
    if tensor.is_cuda and not build_info()["cuda"]:
        raise RuntimeError(
            f"{op_name}: got a CUDA tensor but mma_nmt was built without CUDA kernels (torch was a CPU build or nvcc was "
            f"missing at build time). Install a CUDA build of torch and rebuild with MMA_NMT_CUDA=ON."
        )


_check_torch_version()
