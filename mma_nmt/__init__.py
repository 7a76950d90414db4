"""mma_nmt: fused attention operators and models for neural machine translation research.

Importing the package loads the native extension, which registers the operators under ``torch.ops.mma_nmt``.
"""

from mma_nmt._extension import build_info, cuda_unavailable_reason
from mma_nmt import ops, reference, modules  # noqa: E402  (ops must load after the extension)

__version__ = "0.1.0"
__all__ = ["build_info", "cuda_unavailable_reason", "ops", "reference", "modules", "Translator", "__version__"]


def __getattr__(name: str):
    """``mma_nmt.Translator`` (imported on first use: it pulls in the models and the decoder)."""
    if name == "Translator":
        from mma_nmt.translator import Translator

        return Translator
    raise AttributeError(f"module 'mma_nmt' has no attribute {name!r}")
