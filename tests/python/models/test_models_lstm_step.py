"""The LSTM decoder step on the way to a GPU (issue 49, point 4): a training step builds no attention weights, the step
(training and beam search) compiles whole (``fullgraph=True``: no graph break, hence no host read inside it) and
equals eager, the whole training forward+loss+backward compiled equals eager, the model runs under
``torch.compile(mode="reduce-overhead")`` on the CPU (which falls back to plain compiled code), and on a GPU the step is
captured in a CUDA graph and replayed against eager (marked ``cuda``)."""

from __future__ import annotations

import pytest
import torch
from torch.nn import functional as F

from mma_nmt.decoding.search import SearchConfig, SpecialIds, _step_log_probs
from mma_nmt.models import build_model, preset
from mma_nmt.models.incremental import reorder_incremental_state
from mma_nmt.models.lstm_step import CapturedStep, LSTMStepFunction
from nmt_fixtures import random_batch

FORMS = ["projected_keys", "projected_query"]


pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def _lstm(implementation="fused", score_form="projected_keys", dropout=0.0, layers=2, **overrides):
    torch.manual_seed(0)
    return build_model(preset("lstm_tiny", src_vocab_size=37, tgt_vocab_size=41, dropout=dropout, heads=2,
                              layers=layers, implementation=implementation, score_form=score_form, **overrides))


def _loss_and_grads(model, run):
    model.zero_grad(set_to_none=True)
    src, lengths, prev, tgt = random_batch(batch=3)
    logits = run(model, src, lengths, prev)
    loss = F.cross_entropy(logits.flatten(0, 1), tgt.flatten())
    loss.backward()
    return [logits.detach(), loss.detach()] + [p.grad.clone() for p in model.parameters()]


def _grads(model):
    """Every parameter's gradient; zeros for those a lone step does not reach (the output layer)."""
    return [torch.zeros_like(p) if p.grad is None else p.grad.clone() for p in model.parameters()]


def _assert_all_close(got, want, **tolerance):
    assert len(got) == len(want)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, **tolerance)


@pytest.mark.parametrize("implementation", ["fused", "reference"])
def test_a_training_step_builds_no_attention_weights(implementation, monkeypatch):
    """Every step asks its attention for no weights (so the fused operator writes none), unless the caller asks for
    them; the logits and every gradient are the same either way."""
    model = _lstm(implementation).train()
    attention = model.decoder.attention
    asked = []
    attend = attention.attend

    def spy(query, memory, need_weights):
        asked.append(need_weights)
        context, weights = attend(query, memory, need_weights)
        assert (weights is None) == (not need_weights)
        return context, weights

    monkeypatch.setattr(attention, "attend", spy)
    trained = _loss_and_grads(model, lambda m, src, lengths, prev: m(src, lengths, prev))
    steps = random_batch(batch=3)[2].shape[1]
    assert asked == [False] * steps
    asked.clear()

    def with_weights(m, src, lengths, prev):
        logits, weights = m.decode(prev, m.encode(src, lengths), need_weights=True)
        assert weights[0].shape == (3, 2, steps, src.shape[1])  # (B, h, T, S)
        return logits

    _assert_all_close(_loss_and_grads(model, with_weights), trained, rtol=0, atol=0)
    assert asked == [True] * steps


@pytest.mark.parametrize("score_form", FORMS)
@pytest.mark.parametrize("implementation", ["fused", "reference"])
def test_decoder_step_compiles_whole_and_equals_eager_with_gradients(implementation, score_form):
    model = _lstm(implementation, score_form).train()
    src, lengths, prev, _ = random_batch(batch=3)
    step = LSTMStepFunction(model.decoder)
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")  # a graph break or host read would raise
    results = []
    for run in (step, compiled):
        model.zero_grad(set_to_none=True)
        encoder_out = model.encode(src, lengths)
        inputs = LSTMStepFunction.inputs(model.decoder.embedding(prev[:, 0]), encoder_out,
                                         model.decoder.initial_state(encoder_out))
        assert len(inputs) == (7 if score_form == "projected_keys" else 6)
        outputs = run(*inputs)
        sum(out.square().sum() * (i + 1) for i, out in enumerate(outputs)).backward()
        results.append([out.detach() for out in outputs] + _grads(model))
    _assert_all_close(results[1], results[0], rtol=1e-5, atol=1e-6)


def test_step_function_is_the_decoder_step():
    model = _lstm().train()
    src, lengths, prev, _ = random_batch(batch=3)
    encoder_out = model.encode(src, lengths)
    state = model.decoder.initial_state(encoder_out)
    embedding = model.decoder.embedding(prev[:, 0])
    a_softmax, h, c, feed = LSTMStepFunction(model.decoder)(*LSTMStepFunction.inputs(embedding, encoder_out, state))
    want, _ = model.decoder.step(embedding, encoder_out, state)
    _assert_all_close([a_softmax, h, c, feed], [want, state["h"], state["c"], state["feed"]], rtol=0, atol=0)


def test_dropout_falls_between_the_decoder_layers_only(monkeypatch):
    """OpenNMT-py's stacked decoder: each layer's h but the top one's is dropped out before the next layer reads it
    (the attention reads the top h as it is). A dropout of the top h was drawn and thrown away until 2026-12-02."""
    model = _lstm(dropout=0.3, layers=3).train()
    src, lengths, prev, _ = random_batch(batch=3)
    encoder_out = model.encode(src, lengths)
    state = model.decoder.initial_state(encoder_out)
    dropped = []

    def recording_dropout(x, p=0.5, training=True, inplace=False):
        dropped.append(x)
        return x

    monkeypatch.setattr(F, "dropout", recording_dropout)
    model.decoder.step(model.decoder.embedding(prev[:, 0]), encoder_out, state)
    assert len(dropped) == 2
    for layer, x in enumerate(dropped):
        assert torch.equal(x, state["h"][:, layer])


def test_decoder_step_with_dropout_compiles_whole():
    """Dropout in training mode stays inside the graph (its random draws are not compared with eager's)."""
    model = _lstm(dropout=0.3).train()
    src, lengths, prev, _ = random_batch(batch=3)
    encoder_out = model.encode(src, lengths)
    inputs = LSTMStepFunction.inputs(model.decoder.embedding(prev[:, 0]), encoder_out,
                                     model.decoder.initial_state(encoder_out))
    outputs = torch.compile(LSTMStepFunction(model.decoder), fullgraph=True, backend="aot_eager")(*inputs)
    assert outputs[0].shape == (3, model.config.softmax_dim) and torch.isfinite(outputs[0]).all()


@pytest.mark.parametrize("score_form", FORMS)
def test_beam_search_step_compiles_whole_and_equals_eager(score_form):
    """The search's step (incremental decode of the last tokens and the constraints, some rows forced to end) has the
    same shapes at every step and compiles whole; beams are reordered between steps, outside it."""
    model = _lstm("fused", score_form).eval()
    src, lengths, _, _ = random_batch(batch=3)
    rows = torch.arange(3).repeat_interleave(2)  # 2 beams per sentence
    encoder_out = model.encode(src, lengths).index_select(rows)
    config, ids = SearchConfig(beam_size=2, min_len=2), SpecialIds()

    def step(last_tokens, forced, state, number):
        return _step_log_probs(model, last_tokens, encoder_out, state, ids=ids, step=number, config=config,
                               forced_eos=forced)

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    states, tokens = ({}, {}), torch.full((6, 1), ids.bos)
    forced = torch.tensor([False, False, True, False, False, True])
    with torch.no_grad():
        for number in range(3):
            eager_out = step(tokens, forced, states[0], number)
            compiled_out = compiled(tokens, forced, states[1], number)
            torch.testing.assert_close(compiled_out, eager_out, rtol=1e-5, atol=1e-6)
            assert torch.isinf(eager_out[forced][:, torch.arange(41) != ids.eos]).all()
            assert torch.isinf(eager_out[:, ids.eos]).all() == (number + 1 < config.min_len)
            order = torch.tensor([1, 0, 2, 3, 5, 4])
            for state in states:
                reorder_incremental_state(state, order)
            tokens = eager_out.argmax(-1, keepdim=True).index_select(0, order)


@pytest.mark.parametrize("implementation", ["fused", "reference"])
def test_training_forward_loss_and_backward_compiled_equal_eager(implementation):
    """The trainer's forward (logits of the real target positions) and loss, compiled with aot_eager (the encoder's
    packed sequence may break the graph; the decoder loop is traced), give eager's loss and gradients."""
    model = _lstm(implementation).train()

    def forward(m, src, lengths, prev):
        return m(src, lengths, prev, output_mask=prev != 0).unsqueeze(0)  # (1, N, V)

    eager = _loss_and_grads(model, forward)
    compiled = _loss_and_grads(model, torch.compile(forward, backend="aot_eager"))
    _assert_all_close(compiled, eager, rtol=1e-5, atol=1e-6)


def test_lstm_runs_under_reduce_overhead_on_the_cpu():
    """``mode="reduce-overhead"`` asks for CUDA graphs; on CPU tensors inductor skips them and runs its compiled code,
    which must give eager's logits."""
    model = _lstm().eval()
    src, lengths, prev, _ = random_batch(batch=3)
    compiled = torch.compile(model, mode="reduce-overhead")
    with torch.no_grad():
        torch.testing.assert_close(compiled(src, lengths, prev), model(src, lengths, prev), rtol=1e-5, atol=1e-5)


@pytest.mark.cuda
@pytest.mark.parametrize("score_form", FORMS)
def test_cuda_graph_replays_the_decoder_step(score_form):
    """Inference: the step captured once in a ``torch.cuda.CUDAGraph`` (``CapturedStep``) and replayed on new inputs
    copied into its static tensors equals eager. Training: ``torch.cuda.make_graphed_callables`` (forward and backward graphs) gives
    eager's outputs and gradients. bfloat16 is left to the benchmarks; this checks correctness in float32."""
    model = _lstm("fused", score_form).cuda()
    src, lengths, prev, _ = (t.cuda() for t in random_batch(batch=4))
    step = LSTMStepFunction(model.decoder)

    def step_inputs(token):
        encoder_out = model.encode(src, lengths)
        return LSTMStepFunction.inputs(model.decoder.embedding(prev[:, token]), encoder_out,
                                       model.decoder.initial_state(encoder_out))

    model.eval()
    captured = CapturedStep(step, step_inputs(0))
    for token in (1, 2):
        fresh = step_inputs(token)
        replayed = [out.clone() for out in captured(*fresh)]
        with torch.no_grad():
            _assert_all_close(replayed, list(step(*fresh)), rtol=1e-5, atol=1e-5)

    model.train()
    sample = tuple(x.detach().clone().requires_grad_(x.is_floating_point()) for x in step_inputs(0))
    graphed = torch.cuda.make_graphed_callables(LSTMStepFunction(model.decoder), sample)  # one callable: its args
    results = []
    for run in (step, graphed):
        model.zero_grad(set_to_none=True)
        inputs = tuple(x.detach().clone().requires_grad_(x.is_floating_point()) for x in step_inputs(1))
        outputs = run(*inputs)
        sum(out.square().sum() * (i + 1) for i, out in enumerate(outputs)).backward()
        results.append([out.detach() for out in outputs] + _grads(model)
                       + [x.grad for x in inputs if x.is_floating_point()])
    _assert_all_close(results[1], results[0], rtol=1e-4, atol=1e-5)
