"""mma_nmt: fused attention operators and models for neural machine translation research.

Importing the package loads the native extension, which registers the operators under ``torch.ops.mma_nmt``. Without
it (a checkout that was never built) the package still imports: the reference modules (``implementation="reference"``),
data, evaluation and analysis work, and a fused operator raises :class:`ExtensionUnavailableError` saying how to build.
"""

from mma_nmt._extension import ExtensionUnavailableError, build_info, cuda_unavailable_reason, extension_available
from mma_nmt import ops, reference, modules  # noqa: E402  (ops must load after the extension)

__version__ = "0.1.0"
__all__ = ["ExtensionUnavailableError", "build_info", "cuda_unavailable_reason", "extension_available", "ops", "reference",
           "modules", "Translator", "__version__"]


def __getattr__(name: str):
    """``mma_nmt.Translator`` (imported on first use: it pulls in the models and the decoder)."""
    if name == "Translator":
        from mma_nmt.translator import Translator

        return Translator
    raise AttributeError(f"module 'mma_nmt' has no attribute {name!r}")
