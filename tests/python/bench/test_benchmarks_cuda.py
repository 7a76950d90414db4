"""What of ``python -m benchmarks --device cuda`` can be checked without a GPU: the command line, the clear failure
without a GPU, and that every case the GPU suite times is built and computes the right thing (run here on the CPU)."""

from __future__ import annotations

import pytest
import torch

from benchmarks import cuda_attention, cuda_operators, cuda_training
from benchmarks.__main__ import main, parse_args, report_name
from benchmarks.cuda_suite import CUDA_SECTIONS
from mma_nmt import cuda_unavailable_reason

FORWARD_OPS = {"attention", "gmm_attention", "multihop_gate", "multihop_second_hop", "multilayer_attention",
               "shared_value_attention"}


def test_device_flag_selects_the_cuda_suite_and_its_sections():
    args = parse_args(["--device", "cuda", "--only", "training", "--quick"])
    assert args.device == "cuda" and args.only == ["training"]
    assert report_name(args, "quick").split(".")[1:] == ["cuda", "quick", "training"]
    assert parse_args([]).device == "cpu"


def test_cuda_suite_rejects_a_cpu_only_section():
    with pytest.raises(SystemExit):
        parse_args(["--device", "cuda", "--only", "roofline"])


@pytest.mark.skipif(cuda_unavailable_reason() is None, reason="a GPU is here: the suite would run")
def test_cuda_suite_without_a_gpu_fails_saying_why(tmp_path):
    with pytest.raises(SystemExit, match="GPU|CUDA kernels"):
        main(["--device", "cuda", "--tiny", "--out", str(tmp_path)])
    assert not list(tmp_path.iterdir())  # no report written


def test_every_operator_is_benchmarked_in_every_profile():
    registered = {name.split("::")[1] for name in torch._C._dispatch_get_all_op_names()
                  if name.startswith("mma_nmt::") and not name.endswith("_backward")}
    assert registered == FORWARD_OPS  # a new operator must be added to the GPU suite (and here)
    for profile, cases in cuda_operators.CASES.items():
        assert {c.operator for c in cases} == FORWARD_OPS, profile
    assert set(CUDA_SECTIONS) == {"operators", "attention", "training"}


@pytest.mark.parametrize("case", cuda_operators.CASES["tiny"], ids=lambda c: c.operator)
def test_operator_case_times_the_fused_operator_against_its_reference(case):
    fused, reference, leaves = case.make("cpu", torch.float64)
    torch.testing.assert_close(fused(), reference(), rtol=1e-9, atol=1e-9)
    assert all(leaf.requires_grad for leaf in leaves)


@pytest.mark.parametrize("spec", ["G", "GLFB"])
def test_attention_contenders_compute_the_same_attention(spec):
    q, k, v = (torch.randn(2, 4, 16, 8, dtype=torch.float64) for _ in range(3))
    calls = cuda_attention.contenders(spec, q, k, v, torch.tensor([16, 9]), torch.float64)
    assert set(calls) == {"fused", "SDPA+mask", "Flex"}  # flash only for float16/bfloat16 global heads, unpadded
    torch.testing.assert_close(calls["fused"](), calls["SDPA+mask"](), rtol=1e-9, atol=1e-9)
    layer, leaves = cuda_attention.layer_contenders(spec, 2, 4, 16, 8, torch.float64, device="cpu")
    assert layer["fused"]().shape == layer["nn.MultiheadAttention"]().shape == (2, 16, 32)


def test_training_step_runs_both_models_on_a_random_batch():
    batch = cuda_training.random_batch(3, 8, device="cpu")
    assert batch.src.shape[0] == 3 and batch.num_tokens == int((batch.tgt_out != cuda_training.PAD).sum())
    for case in cuda_training.SIZES["tiny"].models:  # MMA vs nn.MultiheadAttention, GMM and LSTM vs reference
        for implementation in ("fused", case.baseline):
            cuda_training.train_step_fn(case.config(implementation), batch, None)()


def test_training_steps_take_the_trainers_compile_modes(monkeypatch):
    """``python -m benchmarks.cuda_training --compile reduce-overhead`` compiles both models of a pair as
    ``train.compile`` does (mma_nmt.training.trainer.compiled: the CUDA-graph replay on a GPU); eager by default."""
    seen = []

    def recording(model, mode):
        seen.append(mode)
        return model

    monkeypatch.setattr(cuda_training, "compiled", recording)
    batch = cuda_training.random_batch(2, 6, device="cpu")
    case = cuda_training.SIZES["tiny"].models[0]
    cuda_training.train_step_fn(case.config("fused"), batch, None, "reduce-overhead")()
    cuda_training.train_step_fn(case.config(case.baseline), batch, None)()
    assert seen == ["reduce-overhead", False]
    with pytest.raises(SystemExit):  # a precision the section does not know is refused before any GPU work
        cuda_training.main(["--precision", "float8"])


def test_the_deterministic_contender_runs_its_step_under_deterministic_algorithms():
    seen = []
    cuda_training.deterministic(lambda: seen.append(torch.are_deterministic_algorithms_enabled()))()
    assert seen == [True] and not torch.are_deterministic_algorithms_enabled()


def test_training_section_times_the_issues_systems_against_their_baselines():
    quick = {(case.preset, case.attention, case.baseline) for case in cuda_training.SIZES["quick"].models}
    assert quick == {("transformer_iwslt_small", "MMA", "torch"), ("transformer_iwslt_small", None, "torch"),
                     ("transformer_iwslt_small", "GMM", "reference"), ("lstm_iwslt15", None, "reference")}
    lstm = next(c for c in cuda_training.SIZES["quick"].models if c.preset == "lstm_iwslt15")
    assert lstm.config("fused").heads == 4 and lstm.config("reference").implementation == "reference"