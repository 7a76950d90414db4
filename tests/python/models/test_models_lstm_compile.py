"""``train.compile`` for the LSTM (``LSTMModel.compile_decoder_step``): its decoder loops over the target in Python, so
a compiled whole model compiles again for every new target length and, past torch's recompile limit, trains eagerly
without an error. The trainer compiles the decoder step instead, whose shapes depend on the batch size and source
length only: a few graphs for a whole run, the same losses and gradients as eager, no state-dict key, and the eager
step wherever the compiled one does not apply (evaluation, search, weights asked for)."""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.utils import counters
from torch.nn import functional as F

from mma_nmt.models import build_model, preset
from mma_nmt.models.lstm_step import LSTMStepFunction
from mma_nmt.training.trainer import compiled
from nmt_fixtures import VARIED_SHAPES, random_batch


pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def _lstm(score_form="projected_keys"):
    torch.manual_seed(0)
    return build_model(preset("lstm_tiny", src_vocab_size=37, tgt_vocab_size=41, dropout=0.0, heads=2, embed_dim=16,
                              hidden_size=16, softmax_dim=16, feed_dim=8, score_form=score_form)).train()


def _loss_and_grads(model, shape, seed):
    model.zero_grad(set_to_none=True)
    src, lengths, prev, tgt = random_batch(*shape, seed=seed)
    loss = F.cross_entropy(model(src, lengths, prev).flatten(0, 1), tgt.flatten())
    loss.backward()
    return loss.detach(), {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("score_form", ["projected_keys", "projected_query"])
def test_the_compiled_step_trains_like_eager_over_ten_target_lengths_with_few_graphs(score_form):
    """Ten batches of ten target lengths: the compiled step's losses and gradients are eager's, and Dynamo compiled
    four graphs, all in the first two batches: the first step of a sentence (its input feed, zeros, needs no
    gradient) and the later ones, each for the first shape and then with dynamic sizes. The whole model compiled
    makes one graph per target length (12 here) and trains eagerly from the ninth."""
    eager, model = _lstm(score_form), _lstm(score_form)
    model.compile_decoder_step(backend="aot_eager")
    for seed, shape in enumerate(VARIED_SHAPES):
        want_loss, want_grads = _loss_and_grads(eager, shape, seed)
        got_loss, got_grads = _loss_and_grads(model, shape, seed)
        torch.testing.assert_close(got_loss, want_loss, rtol=1e-5, atol=1e-6, msg=lambda m: f"{shape}: {m}")
        assert got_grads.keys() == want_grads.keys() and len(want_grads) > 10
        for name, grad in want_grads.items():
            torch.testing.assert_close(got_grads[name], grad, rtol=1e-4, atol=1e-6,
                                       msg=lambda m, name=name: f"{shape} {name}: {m}")
        if seed == 1:
            graphs = counters["stats"]["unique_graphs"]
    assert 1 <= counters["stats"]["unique_graphs"] == graphs <= 4, dict(counters["stats"])
    assert counters["frames"]["ok"] == counters["frames"]["total"], dict(counters["frames"])


def test_the_compiled_step_is_no_submodule():
    model = _lstm()
    keys = list(model.state_dict())
    model.compile_decoder_step(backend="aot_eager")
    assert list(model.state_dict()) == keys
    assert not any(isinstance(m, LSTMStepFunction) for m in model.modules())


def test_evaluation_search_and_weights_run_the_eager_step():
    """The compiled step serves training only: in eval mode, without gradients, with weights asked for or with an
    incremental state the model takes the eager step (here the compiled one would raise)."""
    model = _lstm()
    calls = []
    model.__dict__["_compiled_step"] = lambda *inputs: calls.append(inputs) or (_ for _ in ()).throw(
        AssertionError("compiled step called"))
    src, lengths, prev, _ = random_batch(3, 7, 6)
    encoder_out = model.encode(src, lengths)
    model.decode(prev, encoder_out, need_weights=True)
    model.decode(prev, encoder_out, incremental_state={})
    with torch.no_grad():
        model(src, lengths, prev)
    model.eval()
    model(src, lengths, prev)
    assert calls == []
    model.train()
    with pytest.raises(AssertionError, match="compiled step called"):
        model(src, lengths, prev)
    assert len(calls) == 1


class _Wrapped(torch.nn.Module):  # as DistributedDataParallel: the model under .module
    def __init__(self, module):
        super().__init__()
        self.module = module


@pytest.mark.parametrize("wrap", [False, True], ids=["alone", "wrapped"])
def test_the_trainer_compiles_the_lstm_step_and_the_transformer_whole(wrap, monkeypatch):
    """``trainer.compiled``: the LSTM (also behind a DDP-like wrapper) comes back itself with its step compiled in the
    mode asked for; a Transformer comes back compiled whole; false compiles nothing."""
    from nmt_fixtures import tiny_transformer

    calls = []
    monkeypatch.setattr(torch, "compile", lambda module, **kwargs: calls.append((type(module).__name__, kwargs))
                        or module)
    lstm = _lstm()
    model = _Wrapped(lstm) if wrap else lstm
    assert compiled(model, "reduce-overhead") is model
    assert calls == [("LSTMStepFunction", {"mode": "reduce-overhead"})]
    assert isinstance(lstm.__dict__["_compiled_step"], LSTMStepFunction)
    transformer = build_model(tiny_transformer())
    calls.clear()
    assert compiled(transformer, True) is transformer  # torch.compile stubbed: it returns what it got
    assert compiled(transformer, False) is transformer
    assert calls == [("TransformerModel", {})]
