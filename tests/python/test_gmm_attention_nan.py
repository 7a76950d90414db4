"""NaN in, NaN out: a NaN in any mixture or localness input of ``mma_nmt::gmm_attention`` reaches the output rows the
plain-PyTorch reference makes NaN, and no others (issue 19, item 3). The floor of sigma and local_width compared
``sigma >= floor``, false for NaN, and so replaced a NaN by the floor: the output stayed finite, hiding a diverged
predictor from the trainer's bad-step check."""

from __future__ import annotations

import pytest
import torch

from gmm_cases import Shape, make_inputs
from mma_nmt.ops import gmm_attention
from mma_nmt.ops.gmm_normalization import GMM_NORMALIZATIONS
from mma_nmt.reference import gmm_attention_reference

NAN_AT = (0, 1, 2)  # (batch, head, query row)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("normalization", GMM_NORMALIZATIONS)
@pytest.mark.parametrize("name", ["sigma", "local_width", "mu", "omega", "local_center", "gate"])
def test_nan_input_gives_nan_output_where_the_reference_does(name, normalization, dtype):
    inputs = make_inputs(Shape(lengths=(7, 5)), normalization=normalization, local=True, dtype=dtype, seed=3)
    with torch.no_grad():
        inputs[name][NAN_AT] = float("nan")  # the whole row's value (gate, local_*) or its first component
    fused = gmm_attention(**inputs).out
    reference = gmm_attention_reference(**inputs)[0]
    nan_rows = reference.isnan().any(-1)
    assert nan_rows[NAN_AT] and int(nan_rows.sum()) == 1  # the reference: exactly that query row
    assert torch.equal(fused.isnan(), reference.isnan())
    torch.testing.assert_close(fused[~nan_rows], reference[~nan_rows].detach())


@pytest.mark.parametrize("name", ["sigma", "local_width"])
def test_nan_below_the_floor_does_not_become_the_floor(name):
    """The floor applies to small values only: a NaN sigma or width is not "below the floor"."""
    inputs = make_inputs(Shape(lengths=None), local=True, seed=4)
    with torch.no_grad():
        inputs[name].fill_(float("nan"))
    assert gmm_attention(**inputs, sigma_floor=0.5).out.isnan().all()
