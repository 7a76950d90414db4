"""The one-GEMM forms of the attention projections and of the GMM predictor networks equal the separate layers, in
values and in parameter gradients."""

import pytest
import torch
from torch import nn

from mma_nmt.modules import GmmAttentionConfig
from mma_nmt.modules.gmm_predictors import MixturePredictor
from mma_nmt.modules.heads import joint_projection


def grads(module):
    return {name: p.grad.clone() for name, p in module.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("bias", [True, False])
def test_joint_projection_equals_separate_layers(bias):
    torch.manual_seed(0)
    layers = nn.ModuleList([nn.Linear(6, 6, bias=bias), nn.Linear(6, 4, bias=bias), nn.Linear(6, 6, bias=bias)])
    x = torch.randn(2, 5, 6)
    joint = joint_projection(x, layers)
    sum(o.square().sum() * (i + 1) for i, o in enumerate(joint)).backward()
    got = grads(layers)
    layers.zero_grad(set_to_none=True)
    separate = [layer(x) for layer in layers]
    sum(o.square().sum() * (i + 1) for i, o in enumerate(separate)).backward()
    for a, b in zip(joint, separate):
        torch.testing.assert_close(a, b)
    for name, g in grads(layers).items():
        torch.testing.assert_close(got[name], g)


@pytest.mark.parametrize("fields", [{}, {"share_mean": True}, {"gate": "average"}])
def test_predictor_networks_equal_each_network_alone(fields):
    torch.manual_seed(0)
    config = GmmAttentionConfig(embed_dim=16, num_heads=2, num_components=3, **fields)
    predictor = MixturePredictor(config, head_dim=8)
    q = torch.randn(2, 5, 2, 8).transpose(1, 2)  # (B, H, T, D), strided like split heads
    outputs = predictor.networks(q)
    sum(o.sin().sum() for o in outputs.values()).backward()
    got = grads(predictor)
    predictor.zero_grad(set_to_none=True)
    separate = {name: getattr(predictor, name)(q) for name in outputs}
    sum(o.sin().sum() for o in separate.values()).backward()
    assert outputs.keys() == separate.keys()
    for name in outputs:
        torch.testing.assert_close(outputs[name], separate[name])
    for name, g in grads(predictor).items():
        torch.testing.assert_close(got[name], g)
