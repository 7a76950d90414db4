"""``decode.compile``: greedy and beam search through the LSTM's compiled decoder step (``SearchStepFunction``) give
eager's hypotheses, compile a few graphs for a corpus of batch shapes, keep training's step apart, and a model whose
incremental step grows (the Transformer) refuses the setting, naming it."""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.utils import counters

from mma_nmt.decoding.compiled_search import apply_search_compile
from mma_nmt.decoding.search import SearchConfig, SpecialIds
from mma_nmt.decoding.translate import translate_ids_nbest
from mma_nmt.models import build_model, preset
from mma_nmt.models.lstm_step import SearchStepFunction
from mma_nmt.training.config import run_config_from_dict
from mma_nmt.training.trainer import Trainer
from nmt_fixtures import random_batch, tiny_data, tiny_overrides, tiny_transformer  # noqa: F401 (a fixture)

IDS = SpecialIds()


pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def _lstm(score_form="projected_keys"):
    torch.manual_seed(0)
    return build_model(preset("lstm_tiny", src_vocab_size=37, tgt_vocab_size=41, dropout=0.1, heads=2, embed_dim=16,
                              hidden_size=16, softmax_dim=16, feed_dim=8, score_form=score_form))


def _sources(count=11, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(4, 37, (int(n),), generator=g) for n in torch.randint(1, 12, (count,), generator=g)]


@pytest.fixture
def aot_eager_compile(monkeypatch):
    """torch.compile with the aot_eager backend (the graphs Dynamo and AOTAutograd make, run eagerly: quick), recording
    the options the model asked for, and counting the calls of the compiled step."""
    asked, calls = [], []
    compile_ = torch.compile

    def compile_step(module, **options):
        asked.append((type(module).__name__, options))
        compiled = compile_(module, backend="aot_eager")
        return lambda *inputs: calls.append(len(inputs)) or compiled(*inputs)

    monkeypatch.setattr(torch, "compile", compile_step)
    return asked, calls


def _translate(model, sources, **decode):
    config = SearchConfig(max_len_a=1.0, max_len_b=4, batch_size=4, **decode)
    return translate_ids_nbest(model, sources, config, IDS, nbest=config.beam_size)


def _assert_same_hypotheses(got, want):
    assert [[h.tokens for h in hyps] for hyps in got] == [[h.tokens for h in hyps] for hyps in want]
    torch.testing.assert_close([[h.score for h in hyps] for hyps in got],
                               [[h.score for h in hyps] for hyps in want], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("score_form", ["projected_keys", "projected_query"])
@pytest.mark.parametrize("beam", [1, 3])
def test_compiled_search_gives_eagers_hypotheses_with_few_graphs(beam, score_form, aot_eager_compile):
    """Three batches of 4, 4 and 3 sentences of varied lengths (11 sources, one a single token): every hypothesis and
    score equal eager's, the compiled step ran at every output position, and Dynamo compiled at most 3 graphs for
    the whole corpus (the first shape, then dynamic sizes)."""
    asked, calls = aot_eager_compile
    model = _lstm(score_form)
    sources = _sources()
    assert min(len(s) for s in sources) == 1
    eager = _translate(model, sources, beam_size=beam)
    assert asked == [] and calls == []
    compiled = _translate(model, sources, beam_size=beam, compile="reduce-overhead")
    _assert_same_hypotheses(compiled, eager)
    assert asked == [("SearchStepFunction", {"mode": "reduce-overhead"})]
    assert len(calls) >= 3 * 4  # at least the shortest output limit (4 positions) in each of the 3 batches
    assert 1 <= counters["stats"]["unique_graphs"] <= 3, dict(counters["stats"])
    assert counters["frames"]["ok"] == counters["frames"]["total"], dict(counters["frames"])


def test_reduce_overhead_search_runs_inductors_code_on_the_cpu():
    """The mode itself, with inductor (no CUDA graphs on CPU tensors): beam search gives eager's hypotheses."""
    model = _lstm()
    sources = _sources(count=6, seed=1)
    eager = _translate(model, sources, beam_size=2)
    _assert_same_hypotheses(_translate(model, sources, beam_size=2, compile="reduce-overhead"), eager)


def test_the_same_mode_keeps_its_step_and_false_returns_to_eager(aot_eager_compile):
    asked, _ = aot_eager_compile
    model = _lstm()
    keys = list(model.state_dict())
    apply_search_compile(model, "reduce-overhead")
    step = model.__dict__["_compiled_search_step"]
    apply_search_compile(model, "reduce-overhead")
    assert model.__dict__["_compiled_search_step"] is step and len(asked) == 1
    apply_search_compile(model, True)
    assert asked[-1] == ("SearchStepFunction", {}) and model.__dict__["_compiled_search_step"] is not step
    apply_search_compile(model, False)
    assert "_compiled_search_step" not in model.__dict__
    assert list(model.state_dict()) == keys
    assert not any(isinstance(m, SearchStepFunction) for m in model.modules())


def test_only_a_search_takes_the_search_step():
    """Without an incremental state, with gradients on, or with weights asked for, the model takes another step (here
    the compiled search step would raise)."""
    model = _lstm().eval()
    model.__dict__["_compiled_search_step"] = lambda *inputs: (_ for _ in ()).throw(AssertionError("search step"))
    src, lengths, prev, _ = random_batch(3, 7, 6)
    encoder_out = model.encode(src, lengths)
    model.decode(prev, encoder_out, incremental_state={})  # gradients on
    with torch.no_grad():
        model.decode(prev, encoder_out)
        model.decode(prev, encoder_out, incremental_state={}, need_weights=True)
        with pytest.raises(AssertionError, match="search step"):
            model.decode(prev, encoder_out, incremental_state={})


def test_a_transformer_refuses_decode_compile_naming_it():
    with pytest.raises(ValueError, match=r"^decode.compile='reduce-overhead' applies to the LSTM models only: a "
                                         r"transformer model's incremental step grows"):
        run_config_from_dict({"decode": {"compile": "reduce-overhead"}})
    assert run_config_from_dict({"model": {"preset": "lstm_tiny"}, "decode": {"compile": True}}).decode.compile is True
    model = build_model(tiny_transformer(src_vocab_size=37, tgt_vocab_size=41))
    with pytest.raises(ValueError, match=r"^decode.compile=True applies to the LSTM models only"):
        _translate(model, _sources(count=2), compile=True)
    assert len(_translate(model, _sources(count=2))) == 2  # false: the eager search, as before


@pytest.mark.cuda
@pytest.mark.parametrize("beam", [1, 4])
def test_cuda_search_replays_the_step_as_cuda_graphs(beam):
    """On a GPU, ``"reduce-overhead"`` records the step's CUDA graphs and replays them at every position: the
    hypotheses are eager's (float32), including the beams reordered between replays."""
    model = _lstm().cuda()
    sources = _sources(count=9, seed=2)
    config = SearchConfig(beam_size=beam, max_len_a=1.0, max_len_b=4, batch_size=4)
    eager = translate_ids_nbest(model, sources, config, IDS, nbest=beam, device="cuda")
    config.compile = "reduce-overhead"
    compiled = translate_ids_nbest(model, sources, config, IDS, nbest=beam, device="cuda")
    _assert_same_hypotheses(compiled, eager)


def test_training_validates_through_the_compiled_search_step(tiny_data, tmp_path, aot_eager_compile, monkeypatch):
    """An LSTM run with ``decode.compile``: its validation searches (after updates 2 and 4) run the compiled step,
    compiled once for the run, and translate as those of an eager run of the same seed."""
    from mma_nmt.training import trainer as trainer_module
    from mma_nmt.training.config import load_run_config

    asked, calls = aot_eager_compile
    translations = []
    translate = trainer_module.translate_dataset
    monkeypatch.setattr(trainer_module, "translate_dataset",
                        lambda *args, **kwargs: translations.append(translate(*args, **kwargs)) or translations[-1])
    lstm = ["model.preset=lstm_tiny", "model.embed_dim=16", "model.hidden_size=16", "model.softmax_dim=16",
            "model.feed_dim=8"]
    for name, extra in (("eager", []), ("compiled", ["decode.compile=reduce-overhead"])):
        overrides = tiny_overrides(tiny_data, tmp_path / name, "train.max_steps=4", "train.validate_every=2",
                                   "train.bleu_sentences=6", "decode.beam_size=2", "decode.max_len_b=4", *extra,
                                   model=lstm)
        Trainer(load_run_config(None, overrides)).train()
    assert asked == [("SearchStepFunction", {"mode": "reduce-overhead"})] and calls
    assert len(translations) == 4 and any(line for lines in translations for line in lines)
    assert translations[2:] == translations[:2]
