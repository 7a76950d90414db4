"""Loads the native extension ``mma_nmt._C`` when it is there, and says what is wrong when it is not.

Without the extension (a source checkout that was never built, or a build that does not load with the installed torch)
``import mma_nmt`` still works, and so do the reference modules (``implementation="reference"``), data, evaluation and
analysis, which need no compiled code. Calling a fused operator then raises :class:`ExtensionUnavailableError`, which
says how to build it. A build that exists but does not load also warns once at import, since its owner expects it to
work.
"""

from __future__ import annotations

import importlib
import warnings

import torch

BUILD_COMMAND = "pip install --no-build-isolation -e . (or make setup) in the source checkout"
_REBUILD = "Rebuild it against the installed torch: pip install --no-build-isolation --force-reinstall ."

try:  # import_module, not `from mma_nmt import _C`, which turns "no such module" into a vaguer ImportError
    _C = importlib.import_module("mma_nmt._C")
except ImportError as error:
    _C = None
    # Never built: no warning, since the reference path still works.
    if isinstance(error, ModuleNotFoundError) and error.name == "mma_nmt._C":
        LOAD_ERROR: str | None = "the compiled extension mma_nmt._C is not built"
    else:  # an undefined symbol here almost always means another torch was installed after building
        LOAD_ERROR = f"the compiled extension mma_nmt._C could not be loaded with torch {torch.__version__} ({error})"
        warnings.warn(f"mma_nmt: {LOAD_ERROR}; the fused operators are unavailable. {_REBUILD}", RuntimeWarning,
                      stacklevel=2)
else:
    LOAD_ERROR = None


class ExtensionUnavailableError(RuntimeError):
    """A fused operator was called but the compiled extension ``mma_nmt._C`` is missing or does not load."""


def extension_available() -> bool:
    """Whether the compiled extension loaded, i.e. whether the fused operators ``torch.ops.mma_nmt.*`` exist."""
    return _C is not None


def extension_module():
    """The loaded module ``mma_nmt._C`` (None without the extension)."""
    return _C


def require_extension(op_name: str) -> None:
    """Raises :class:`ExtensionUnavailableError` naming ``op_name`` and the way to build, when the extension is missing."""
    if _C is None:
        raise ExtensionUnavailableError(
            f"{op_name}: {LOAD_ERROR}. Build it with {BUILD_COMMAND}; without it only the plain-PyTorch reference path "
            f"works (modules with implementation=\"reference\")."
        )


def build_info() -> dict:
    """How the extension was built: ``extension`` (whether it loaded), ``cuda`` (CUDA kernels compiled),
    ``torch_version`` (torch it was built against) and ``cpu_kernel`` (the instruction set of the CPU kernels in use
    on this machine). Without the extension: ``extension`` False, ``cuda`` False, ``torch_version`` and ``cpu_kernel``
    None, and ``error`` saying why."""
    if _C is None:
        return {"extension": False, "cuda": False, "torch_version": None, "cpu_kernel": None, "error": LOAD_ERROR}
    return {"extension": True, **dict(_C.build_info())}


def cuda_unavailable_reason() -> str | None:
    """Why the CUDA operators cannot run here (no GPU visible, or a build without CUDA kernels), or None when they can.
    The CUDA test suite and the CUDA benchmarks both ask this."""
    if not torch.cuda.is_available():
        return "no GPU is visible to torch (torch.cuda.is_available() is False)"
    if _C is None:
        return f"{LOAD_ERROR}; build it with {BUILD_COMMAND}"
    if not build_info()["cuda"]:
        return "mma_nmt was built without its CUDA kernels; rebuild it against a CUDA build of torch with nvcc on PATH"
    return None


def _check_torch_version() -> None:
    if _C is None:
        return
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
