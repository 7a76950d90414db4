"""The LSTM decoder step on a GPU (issue 49, points 4 and 5): eager against CUDA-graph replay of the same step, for
decoding (``CapturedStep``, forward) and training (``torch.cuda.make_graphed_callables``, forward+backward), with the
kernel launches one call issues (the CUDA runtime's launch calls the profiler records on the host: many for eager, one
graph launch for a replay). Sizes of the issue's Luong step: the ``lstm_iwslt15`` model (dh 1024, h 4, 2 layers), B 128,
sources of 30 and 50 tokens; bfloat16 first. Not part of ``python -m benchmarks --device cuda`` yet.

    python -m benchmarks.cuda_lstm_step [--quick] [--dtype bfloat16] [--score-form projected_keys|projected_query]
"""

from __future__ import annotations

import argparse

import torch

from benchmarks.gpu_counters import launches_per_call
from benchmarks.timing import markdown_table, time_interleaved
from mma_nmt.models import build_model, preset
from mma_nmt.models.lstm_step import CapturedStep, LSTMStepFunction

VOCAB = 1000
SIZES = {"full": [(128, 30), (128, 50)], "quick": [(128, 30)]}
COLUMNS = ["model", "B", "S", "dtype", "pass", "eager ms", "replay ms", "eager / replay", "eager launches",
           "replay launches"]


def step_setup(batch: int, src_len: int, *, dtype: torch.dtype, device: str, score_form: str = "projected_keys",
               model_preset: str = "lstm_iwslt15", **overrides):
    """(model, step function, inputs of one decoder step) on ``device`` in ``dtype``: random sources with lengths in
    [S/2, S], the first full; dropout 0 so that eager and replay compute the same."""
    torch.manual_seed(0)
    model = build_model(preset(model_preset, src_vocab_size=VOCAB, tgt_vocab_size=VOCAB, dropout=0.0,
                               implementation="fused", score_form=score_form, **overrides))
    model = model.to(device=device, dtype=dtype)
    src = torch.randint(4, VOCAB, (batch, src_len), device=device)
    lengths = torch.randint(src_len // 2, src_len + 1, (batch,), device=device)
    lengths[0] = src_len
    with torch.no_grad():
        encoder_out = model.encode(src, lengths)
        tokens = torch.randint(4, VOCAB, (batch,), device=device)
        inputs = LSTMStepFunction.inputs(model.decoder.embedding(tokens), encoder_out,
                                         model.decoder.initial_state(encoder_out))
    return model, LSTMStepFunction(model.decoder), tuple(x.contiguous() for x in inputs)


def eager_call(step, inputs, backward: bool):
    """One eager step: under ``no_grad`` for decoding; with the backward of every output for training."""
    leaves = tuple(x.detach().requires_grad_(x.is_floating_point()) for x in inputs)

    def call():
        if not backward:
            with torch.no_grad():
                step(*inputs)
            return
        outputs = step(*leaves)
        torch.autograd.backward(outputs, [torch.ones_like(out) for out in outputs])
    return call


def replay_call(step, inputs, backward: bool):
    """The same step replayed from a CUDA graph (CUDA only)."""
    if not backward:
        captured = CapturedStep(step, inputs)
        return lambda: captured(*inputs)
    sample = tuple(x.detach().clone().requires_grad_(x.is_floating_point()) for x in inputs)
    # Not every input reaches every output's gradient (the step reads some only as data).
    graphed = torch.cuda.make_graphed_callables(step, sample, allow_unused_input=True)

    def call():
        outputs = graphed(*sample)
        torch.autograd.backward(outputs, [torch.ones_like(out) for out in outputs])
    return call


def rows(profile: str, dtype: torch.dtype, score_form: str, repeat: int) -> list[list]:
    out = []
    for batch, src_len in SIZES[profile]:
        model, step, inputs = step_setup(batch, src_len, dtype=dtype, device="cuda", score_form=score_form)
        for backward in (False, True):
            model.train(backward)
            eager, replay = eager_call(step, inputs, backward), replay_call(step, inputs, backward)
            t_eager, t_replay = time_interleaved([eager, replay], repeat=repeat, synchronize=torch.cuda.synchronize)
            out.append([f"lstm_iwslt15 {score_form}", batch, src_len, str(dtype).removeprefix("torch."),
                        "fwd+bwd" if backward else "fwd", t_eager * 1e3, t_replay * 1e3, t_eager / t_replay,
                        launches_per_call(eager), launches_per_call(replay)])
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="S = 30 only, fewer repeats")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    parser.add_argument("--score-form", default="projected_keys", choices=["projected_keys", "projected_query"])
    args = parser.parse_args(argv)
    from benchmarks.cuda_suite import gpu_info, require_cuda
    require_cuda()
    print(f"GPU: {gpu_info()}\n")
    table = rows("quick" if args.quick else "full", getattr(torch, args.dtype), args.score_form,
                 repeat=3 if args.quick else 7)
    print(markdown_table(COLUMNS, table))


if __name__ == "__main__":
    main()
