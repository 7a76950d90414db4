"""``decode.min_len`` above the output limit (issue 50, case 7): refused where the config is read when no sentence
can meet it, and before any search when a sentence's limit (``max_len_a * source length + max_len_b``, at most
``max_positions - 1``) is below it; below the limit every output honours it."""

from __future__ import annotations

import pytest
import torch

from mma_nmt.decoding.search import SearchConfig, SpecialIds, search
from mma_nmt.decoding.translate import translate_ids
from mma_nmt.models import build_model
from mma_nmt.training.config import load_run_config
from nmt_fixtures import tiny_transformer


@pytest.mark.parametrize("overrides, message", [
    (["decode.min_len=300"], r"decode.min_len=300 can never be met: the model's max_positions=256 ends every output by "
                             r"255 tokens \(EOS included\)"),
    (["decode.max_len_a=0", "decode.max_len_b=5", "decode.min_len=6"],
     r"decode.min_len=6 can never be met: with decode.max_len_a=0 every output ends by decode.max_len_b=5 tokens"),
])
def test_a_min_len_no_sentence_can_reach_is_refused_when_read(overrides, message):
    with pytest.raises(ValueError, match=f"^{message}"):
        load_run_config(None, overrides)
    load_run_config(None, overrides[:-1] + [overrides[-1].replace("300", "255").replace("=6", "=5")])  # the limit


def _model():
    torch.manual_seed(0)
    return build_model(tiny_transformer(dropout=0.0)).eval()


@pytest.mark.parametrize("beam", [1, 3])
def test_a_sentence_whose_limit_is_below_min_len_is_named_before_decoding(beam):
    sources = [torch.arange(4, 12), torch.tensor([5, 6])]  # limits 1.0 * 8 + 2 = 10 and 1.0 * 2 + 2 = 4
    config = SearchConfig(beam_size=beam, max_len_a=1.0, max_len_b=2, min_len=6)
    with pytest.raises(ValueError, match=r"^decode.min_len=6 cannot be met for 1 sentence\(s\), first line 2 \(2 source "
                                         r"tokens\): its output limit is 4 tokens \(decode.max_len_a=1 x 2 \+ "
                                         r"decode.max_len_b=2, at most max_positions - 1 = 255\)"):
        translate_ids(_model(), sources, config, SpecialIds())
    src = torch.tensor([[4, 5, 6, 7, 8, 9, 10, 11], [5, 6, 0, 0, 0, 0, 0, 0]])
    with pytest.raises(ValueError, match=r"cannot be met for 1 sentence\(s\), first sentence 1 of the batch"):
        search(_model(), src, torch.tensor([8, 2]), config, SpecialIds())


@pytest.mark.parametrize("beam", [1, 3])
def test_a_reachable_min_len_is_honoured(beam):
    sources = [torch.arange(4, 12), torch.tensor([5, 6])]
    config = SearchConfig(beam_size=beam, max_len_a=1.0, max_len_b=2, min_len=4)
    for hyp in translate_ids(_model(), sources, config, SpecialIds()):
        assert len(hyp.tokens) + 1 >= 4  # EOS included
