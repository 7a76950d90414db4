"""``encoder.layer_aggregation`` (the MLMHA paper's baselines): what the decoder's cross-attention reads. With weights
that pick the top encoder layer, each aggregation gives the standard model's output; the parameters added are the
paper's (L E x E matrices plus a bias and a LayerNorm; (L - 1) FFN merges; an (L + 1) x M matrix)."""

from __future__ import annotations

import pytest
import torch

from mma_nmt.models import build_model
from mma_nmt.models.transformer import DECODER_SOURCES
from nmt_fixtures import random_batch, tiny_transformer


def _pair(kind: str, seed: int = 0):
    """(standard model, the same model with ``kind`` aggregation), sharing every common parameter."""
    torch.manual_seed(seed)
    standard = build_model(tiny_transformer(d_model=16, ffn_dim=32)).eval()
    config = tiny_transformer(d_model=16, ffn_dim=32)
    config.encoder.layer_aggregation = kind
    aggregated = build_model(config).eval()
    missing, unexpected = aggregated.load_state_dict(standard.state_dict(), strict=False)
    assert not unexpected and all(name.startswith("aggregation.") for name in missing)
    return standard, aggregated


def _count(model) -> int:
    return sum(p.numel() for p in model.parameters())


def test_added_parameters_are_the_papers():
    e, layers, decoder_layers, ffn = 16, 2, 2, 32
    standard, linear = _pair("linear")
    assert _count(linear) - _count(standard) == layers * e * e + e + 2 * e
    _, iterative = _pair("iterative")
    assert _count(iterative) - _count(standard) == (layers - 1) * (2 * e * ffn + ffn + ffn * e + e + 2 * e)
    _, transparent = _pair("transparent")
    assert _count(transparent) - _count(standard) == (layers + 1) * decoder_layers


@pytest.mark.parametrize("kind", ["linear", "transparent"])
def test_weights_that_pick_the_top_layer_give_the_standard_model(kind):
    standard, aggregated = _pair(kind, seed=1)
    with torch.no_grad():
        combine = aggregated.aggregation.combine
        if kind == "linear":  # W = [0, I], b = 0: LayerNorm of the (already normalised) top layer
            combine.combine.weight.zero_()
            combine.combine.weight[:, 16:].copy_(torch.eye(16))
            combine.combine.bias.zero_()
        else:  # softmax over [embeddings, layer 1, layer 2] concentrated on layer 2 for both decoder layers
            combine.weights.copy_(torch.tensor([[0.0, 0.0], [0.0, 0.0], [60.0, 60.0]]))
        src, lengths, prev, _ = random_batch()
        torch.testing.assert_close(aggregated(src, lengths, prev), standard(src, lengths, prev), rtol=1e-4, atol=1e-4)


def test_transparent_gives_each_decoder_layer_its_own_mix():
    _, model = _pair("transparent", seed=2)
    with torch.no_grad():
        model.aggregation.combine.weights.copy_(torch.tensor([[50.0, 0.0], [0.0, 0.0], [0.0, 50.0]]))
        src, lengths, _, _ = random_batch()
        encoder_out = model.encode(src, lengths)
        sources = encoder_out.extra[DECODER_SOURCES]  # (B, M, S, E)
        assert sources.shape == (src.shape[0], 2, src.shape[1], 16)
        torch.testing.assert_close(sources[:, 0], model.src_embed(src), rtol=1e-5, atol=1e-5)  # eval: no dropout
        torch.testing.assert_close(sources[:, 1], encoder_out.layer_states[-1], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(encoder_out.out, encoder_out.layer_states[-1])


def test_unknown_aggregation_and_mlmha_combination_are_clear_errors():
    config = tiny_transformer(d_model=16, ffn_dim=32)
    config.encoder.layer_aggregation = "average"
    with pytest.raises(ValueError, match="unknown encoder.layer_aggregation 'average'"):
        build_model(config)
    config.encoder.layer_aggregation, config.decoder.cross_attention = "linear", "mlmha"
    with pytest.raises(ValueError, match="reads the encoder layers itself"):
        build_model(config)
