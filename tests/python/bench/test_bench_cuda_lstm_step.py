"""What of ``python -m benchmarks.cuda_lstm_step`` runs without a GPU: the step it times is the model's decoder step,
its eager calls run (decoding and training), and the command stops saying why where there is no GPU."""

from __future__ import annotations

import pytest
import torch

from benchmarks import cuda_lstm_step
from mma_nmt import cuda_unavailable_reason


@pytest.mark.parametrize("score_form", ["projected_keys", "projected_query"])
def test_step_setup_builds_the_decoder_step_and_its_eager_calls_run(score_form):
    model, step, inputs = cuda_lstm_step.step_setup(3, 5, dtype=torch.float32, device="cpu", score_form=score_form,
                                                    model_preset="lstm_tiny")
    assert inputs[0].shape == (3, model.config.embed_dim) and inputs[4].shape == (3, 5, model.config.hidden_size)
    assert len(inputs) == (7 if score_form == "projected_keys" else 6)
    with torch.no_grad():
        a_softmax, h, c, feed = step(*inputs)
    assert a_softmax.shape == (3, model.config.softmax_dim) and feed.shape == (3, model.config.feed_dim)
    cuda_lstm_step.eager_call(step, inputs, backward=False)()
    model.train()
    cuda_lstm_step.eager_call(step, inputs, backward=True)()
    weight = model.decoder.attention.w_context  # w_sc learns through the keys (an input) in the keys form
    assert weight.grad is not None and weight.grad.abs().sum() > 0


@pytest.mark.skipif(cuda_unavailable_reason() is None, reason="a GPU is here: the benchmark would run")
def test_without_a_gpu_the_benchmark_stops_saying_why():
    with pytest.raises(SystemExit, match="GPU|CUDA"):
        cuda_lstm_step.main(["--quick"])
