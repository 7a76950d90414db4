"""The normalisations of GMM cross-attention's mixture (SPEC section 5): the one set of names that the operator
(:func:`mma_nmt.ops.gmm_attention`), the reference, the module config (``GmmAttentionConfig.normalization``), the
predictors and the model variants (``attention_adapters.GMM_VARIANTS``) use, and its one mapping to the schema's
``int normalization`` (``Normalization`` in csrc/gmm/gmm_math.h).

The mixture weight of key ``j`` is ``beta_j = sum_k omega_k / Z_k * exp(-(j - mu_k)^2 / (2 sigma_k^2))`` on the
sentence's real keys, and

- ``"approximate"`` (the paper's "Our Method"): ``Z_k = sqrt(2 pi) sigma_k``, the Gaussian density, and no
  renormalisation; the mass outside the sentence is kept small by the sigma limits that
  :func:`~mma_nmt.ops.gmm_conversion.approximate_mixture` applies to the network outputs.
- ``"strict"`` ("Our Method+Norm."): the same ``Z_k``, then ``beta`` divided by its sum over the sentence, so that it
  sums to 1; parameters from :func:`~mma_nmt.ops.gmm_conversion.strict_mixture` (or the hard-coded Gaussian).
- ``"unnormalised"`` (the "Synthesis Network" row, Graves' attention): ``Z_k = 1`` and no renormalisation;
  parameters from :func:`~mma_nmt.ops.gmm_conversion.synthesis_mixture`.
"""

from __future__ import annotations

from typing import Literal, get_args

GmmNormalization = Literal["approximate", "strict", "unnormalised"]
GMM_NORMALIZATIONS: tuple[str, ...] = get_args(GmmNormalization)
_SCHEMA_CODES = {"approximate": 0, "strict": 1, "unnormalised": 2}  # kApproximate, kStrict, kUnnormalised


def check_normalization(normalization: str) -> None:
    """Raises ``ValueError`` for a name outside :data:`GMM_NORMALIZATIONS`."""
    if normalization not in _SCHEMA_CODES:
        raise ValueError(f"normalization must be one of {sorted(_SCHEMA_CODES)}, got {normalization!r}")


def normalization_code(normalization: GmmNormalization | int) -> int:
    """The schema's integer for a normalisation name (an integer is passed through for the operator to check)."""
    if isinstance(normalization, int):
        return normalization
    check_normalization(normalization)
    return _SCHEMA_CODES[normalization]
