"""``torch.compile`` of a whole training step (forward, loss, backward) of models on every fused operator, compared
with eager: the fake kernels must report the strides the real kernels return, or inductor's stride assertions (and
the views AOTAutograd plans from them) fail in the backward (issue 19, item 0).

Three tiny models cover the operators that models use (attention, multi-hop second hop, GMM, multi-layer, shared
value; the head-gate operator, used by no model, has its transposed and sliced cases in
``test_fake_kernels_match_real_layouts.py``). Each is compiled with ``aot_eager`` (Dynamo and AOTAutograd plan the
forward and backward graphs from the fake kernels, the ops then run eagerly: about 9 s of CPU per model), and the one
with the most operators also with ``inductor``, the backend users train with, which asserts every planned stride but
compiles about 45 C++ kernels (about 75 s of CPU on the project machine under load). Inductor's cache is a fresh folder
for this module, so that a graph compiled by an earlier run (with other fake kernels) cannot stand in for this one,
while the three models share the kernels they have in common.
"""

from __future__ import annotations

import pytest
import torch

from mma_nmt.models import build_model, preset
from mma_nmt.training.loss import label_smoothed_cross_entropy
from nmt_fixtures import random_batch, tiny_data, tiny_mma_mlmha_transformer, tiny_transformer  # noqa: F401


def _mma_multihop_gmm():
    """Encoder layer 0 standard (fused ``mma_nmt::attention``), layer 1 multi-hop (attention +
    ``multihop_second_hop``); one decoder layer: causal self-attention (``attention``) and GMM cross-attention
    (``gmm_attention``)."""
    config = tiny_transformer(d_model=16, ffn_dim=32)
    config.encoder.attention = "multihop"
    config.encoder.multihop_layers = [1]
    config.decoder.layers = 1
    config.decoder.cross_attention = "gmm"
    return config


def _lstm_luong():
    return preset("lstm_tiny", src_vocab_size=37, tgt_vocab_size=41, dropout=0.0, heads=2, embed_dim=16,
                  hidden_size=16, softmax_dim=16, feed_dim=8, implementation="fused")


@pytest.fixture(scope="module", autouse=True)
def fresh_inductor_cache(tmp_path_factory):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path_factory.mktemp("inductor_cache")))
        yield


MODELS = {"mma+multihop+gmm": _mma_multihop_gmm, "mma+mlmha": tiny_mma_mlmha_transformer, "lstm+luong": _lstm_luong}


def _loss(model, src, lengths, prev, tgt):
    loss, _ = label_smoothed_cross_entropy(model(src, lengths, prev), tgt, epsilon=0.1, ignore_index=0)
    return loss


def _step(step, model, batch):
    model.zero_grad(set_to_none=True)
    loss = step(model, *batch)
    loss.backward()
    return loss.detach(), {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("name, backend", [(name, "aot_eager") for name in MODELS] + [("mma+multihop+gmm", "inductor")])
def test_compiled_training_step_matches_eager(name, backend):
    torch.manual_seed(0)
    model = build_model(MODELS[name]()).train()  # dropout 0: train mode runs the training code paths, deterministically
    batch = random_batch(batch=3, src_len=7, tgt_len=6, seed=1)
    eager_loss, eager_grads = _step(_loss, model, batch)
    torch._dynamo.reset()
    compiled_loss, compiled_grads = _step(torch.compile(_loss, backend=backend, dynamic=False), model, batch)
    torch.testing.assert_close(compiled_loss, eager_loss, rtol=1e-5, atol=1e-6)
    assert compiled_grads.keys() == eager_grads.keys() and len(eager_grads) > 10
    for key, grad in eager_grads.items():
        torch.testing.assert_close(compiled_grads[key], grad, rtol=1e-4, atol=1e-6,
                                   msg=lambda message, key=key: f"{key}: {message}")


@pytest.mark.parametrize("name", ["mma+multihop+gmm", "mma+mlmha"])
def test_a_compiled_transformer_stays_compiled_over_many_batch_shapes(name):
    """The trainer compiles the Transformers whole (``trainer.compiled``): over ten batches of other sizes, lengths
    and padding, Dynamo compiles in the first three only (the first shape, then dynamic sizes), each batch runs
    compiled (no frame falls back past the recompile limit) and gives eager's loss. The LSTM's counterpart is
    ``tests/python/models/test_models_lstm_compile.py``."""
    from torch._dynamo.utils import counters

    from nmt_fixtures import VARIED_SHAPES

    torch.manual_seed(0)
    model = build_model(MODELS[name]()).train()
    torch._dynamo.reset()
    counters.clear()
    step = torch.compile(_loss, backend="aot_eager")
    for seed, shape in enumerate(VARIED_SHAPES):
        batch = random_batch(*shape, seed=seed)
        eager_loss, _ = _step(_loss, model, batch)
        compiled_loss, _ = _step(step, model, batch)
        torch.testing.assert_close(compiled_loss, eager_loss, rtol=1e-5, atol=1e-6, msg=lambda m: f"{shape}: {m}")
        if seed == 2:
            graphs = counters["stats"]["unique_graphs"]
    assert 1 <= counters["stats"]["unique_graphs"] == graphs <= 3, dict(counters["stats"])
    assert counters["frames"]["ok"] == counters["frames"]["total"], dict(counters["frames"])


def test_reduce_overhead_step_compiles_on_the_cpu_without_cuda_graphs_and_matches_eager():
    """``train.compile = "reduce-overhead"``: the trainer's own step (``forward_backward`` through ``compiled``) with
    inductor in that mode. On the CPU torch compiles the same graphs, skips the CUDA graphs (it counts a skip for each
    graph, "cpu device"), and the step equals eager; about 30 s of CPU. Whether a GPU captures the step's graphs with
    our operators is the CUDA test's job (``test_step_without_host_reads.py`` checks no host read happens in them)."""
    from torch._dynamo.utils import counters

    from mma_nmt.data.batch import Batch
    from mma_nmt.training.distributed import DistInfo
    from mma_nmt.training.trainer import compiled, forward_backward

    config = tiny_transformer(d_model=16, ffn_dim=32)
    config.encoder.attention = "mma"  # mixed G/L/F/B heads
    torch.manual_seed(0)
    model = build_model(config).train()
    src, lengths, prev, tgt = random_batch(batch=3, src_len=7, tgt_len=6, seed=1)
    tgt[2, 4:] = 0  # padded targets: no loss there
    batch = Batch(src=src, src_lengths=lengths, tgt_in=prev, tgt_out=tgt, tgt_lengths=(tgt != 0).sum(1),
                  indices=torch.arange(3))

    def step(stepped):
        model.zero_grad(set_to_none=True)
        totals = forward_backward(stepped, [batch], epsilon=0.1, pad_id=0, info=DistInfo())
        return totals, {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}

    eager_totals, eager_grads = step(model)
    torch._dynamo.reset()
    counters.clear()
    compiled_totals, compiled_grads = step(compiled(model, "reduce-overhead"))
    assert counters["inductor"]["cudagraph_skips"] >= 1  # the mode took effect; on the CPU it has no CUDA graphs
    torch.testing.assert_close(compiled_totals, eager_totals, rtol=1e-5, atol=1e-6)
    assert compiled_grads.keys() == eager_grads.keys() and len(eager_grads) > 10
    for key, grad in eager_grads.items():
        torch.testing.assert_close(compiled_grads[key], grad, rtol=1e-4, atol=1e-6,
                                   msg=lambda message, key=key: f"{key}: {message}")


@pytest.mark.parametrize("setting, expected", [("true", {}), ("reduce-overhead", {"mode": "reduce-overhead"}),
                                               ("false", None)])
def test_train_compile_reaches_torch_compile(setting, expected, tmp_path, tiny_data, monkeypatch):  # noqa: F811
    """The setting goes to ``torch.compile`` as its mode (true: torch's default mode; false: eager)."""
    from mma_nmt.training.config import load_run_config
    from mma_nmt.training.trainer import Trainer
    from nmt_fixtures import tiny_overrides

    calls = []
    monkeypatch.setattr(torch, "compile", lambda model, **kwargs: calls.append(kwargs) or model)
    trainer = Trainer(load_run_config(None, tiny_overrides(tiny_data, tmp_path / "run", f"train.compile={setting}")))
    assert calls == ([] if expected is None else [expected])
    assert trainer.train_model is trainer.ddp
