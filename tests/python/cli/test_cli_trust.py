"""The command line loses no line and runs no model with the wrong tokenizer (issue 19, items 4, 5 and 10, and the
"Messages" section): one line reader for every text file, a count check between hypotheses and references, the
tokenizer check of a checkpoint, a policy for over-long input lines, numeric config values checked where they are
read, and ``mma-nmt: error: <message>`` with exit status 2 instead of a traceback."""

from __future__ import annotations

import gzip
import warnings

import pytest
import torch

from mma_nmt.cli.main import main
from mma_nmt.evaluation.bootstrap import paired_bootstrap
from mma_nmt.training.config import load_run_config
from nmt_fixtures import prepare_tiny, trained_tiny_run

SENTENCES = "Ein Hund läuft.\nZwei Männer spielen Fußball.\nEine Frau liest"  # no newline after the last line


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A 2-step tiny Transformer on the tiny data: (command-line --set arguments, checkpoint)."""
    overrides, checkpoint, _ = trained_tiny_run(tmp_path_factory, "cli_trust_run")
    return [item for o in overrides for item in ("--set", o)], checkpoint


def _cli(capsys, *args) -> tuple[int, str, str]:
    status = main(list(args))
    out, err = capsys.readouterr()
    return status, out, err


@pytest.mark.parametrize("text, lines", [("a\nb", ["a", "b"]), ("a\nb\n", ["a", "b"]), ("", []), ("\n", [""]),
                                         ("a\r\nb\r\n", ["a", "b"]), ("a\rb\n", ["a\rb"]), ("\n\nc", ["", "", "c"])])
def test_read_text_lines_keeps_every_line(tmp_path, text, lines):
    from mma_nmt.data.fileio import read_text_lines  # the one reader of the command line's text files

    path = tmp_path / "text.txt"
    path.write_bytes(text.encode("utf-8"))
    assert read_text_lines(path) == lines
    path.write_bytes(gzip.compress(text.encode("utf-8")))
    assert read_text_lines(path) == lines


def test_a_last_line_without_newline_is_translated(trained, tmp_path, capsys):
    sets, checkpoint = trained
    source, out = tmp_path / "raw.de", tmp_path / "raw.hyp"
    source.write_text(SENTENCES, encoding="utf-8")
    status, _, err = _cli(capsys, "translate", *sets, "--checkpoint", str(checkpoint), "--input", str(source),
                          "--output", str(out))
    assert status == 0, err
    assert len(out.read_text(encoding="utf-8").split("\n")[:-1]) == 3  # written with a final newline


def test_evaluate_scores_every_line_and_refuses_a_count_mismatch(trained, tmp_path, capsys):
    sets = [*trained[0], "--set", "eval.buckets=[]"]
    hyp, ref, short = tmp_path / "hyp.txt", tmp_path / "ref.txt", tmp_path / "short.txt"
    hyp.write_text("a dog runs\ntwo men play\na woman", encoding="utf-8")
    ref.write_text("a dog runs .\ntwo men play football .\na woman reads", encoding="utf-8")
    short.write_text("a dog runs\n", encoding="utf-8")
    status, out, err = _cli(capsys, "evaluate", *sets, "--hyp", str(hyp), "--ref", str(ref), "--json")
    assert status == 0, err
    assert '"sentences": 3' in out
    status, _, err = _cli(capsys, "evaluate", *sets, "--hyp", str(short), "--ref", str(ref))
    assert status == 2 and err.startswith(f"mma-nmt: error: {short} has 1 lines but the references ({ref}) have 3")
    status, _, err = _cli(capsys, "evaluate", *sets, "--hyp", str(hyp), "--ref", str(ref), "--baseline", str(short))
    assert status == 2 and f"{short} has 1 lines but the references" in err


def test_a_zero_difference_is_never_significant():
    references = ["a cat sits on the mat today ."] * 30
    baseline, system = ["x y"] * 30, ["z w"] * 30  # different outputs, both BLEU 0.0
    result = paired_bootstrap(baseline, system, references, samples=200)
    assert result["system_bleu"] == result["baseline_bleu"] == 0.0
    assert result["p_value"] == 1.0
    with pytest.raises(ValueError, match="bootstrap samples must be at least 1, got 0"):
        paired_bootstrap(baseline, system, references, samples=0)


def test_translate_refuses_a_checkpoint_of_another_vocabulary(trained, tmp_path, capsys):
    sets, checkpoint = trained
    other = prepare_tiny(tmp_path / "other_vocab", vocab_size=200)
    source = tmp_path / "raw.de"
    source.write_text(SENTENCES, encoding="utf-8")
    status, _, err = _cli(capsys, "translate", *sets, "--set", f"data.out_dir={other}", "--checkpoint",
                          str(checkpoint), "--input", str(source), "--output", str(tmp_path / "out"))
    assert status == 2 and "was trained with a src vocabulary of" in err and "tokenizer" in err
    assert not (tmp_path / "out").exists()


def test_translate_refuses_another_tokenizer_of_the_same_size(trained, tmp_path, capsys):
    sets, checkpoint = trained
    payload = torch.load(checkpoint, weights_only=True)
    payload["tokenizers"]["tgt"] = "0" * 64  # as if trained with another SentencePiece model of the same size
    forged = tmp_path / "forged.pt"
    torch.save(payload, forged)
    source = tmp_path / "raw.de"
    source.write_text(SENTENCES, encoding="utf-8")
    status, _, err = _cli(capsys, "translate", *sets, "--checkpoint", str(forged), "--input", str(source),
                          "--output", str(tmp_path / "out"))
    assert status == 2 and f"checkpoint {forged} was trained with another tgt SentencePiece model" in err


def test_an_over_long_line_is_named_or_truncated(trained, tmp_path, capsys):
    sets, checkpoint = trained
    source, out = tmp_path / "raw.de", tmp_path / "raw.hyp"
    source.write_text("Ein Hund läuft.\n" + "Hund " * 400 + "\nEine Frau liest.\n", encoding="utf-8")
    args = ("translate", *sets, "--checkpoint", str(checkpoint), "--input", str(source), "--output", str(out))
    status, _, err = _cli(capsys, *args)
    assert status == 2 and "longer than the model's max_positions=256 subword tokens: line 2 (" in err
    assert "decode.too_long=truncate" in err and not out.exists()
    with pytest.warns(UserWarning, match=r"1 source line\(s\) cut to the model's max_positions=256 .* line 2 \("):
        status, _, err = _cli(capsys, *args, "--set", "decode.too_long=truncate")
    assert status == 0, err
    assert len(out.read_text(encoding="utf-8").split("\n")[:-1]) == 3  # written with a final newline


def test_errors_are_one_line_with_status_2_and_a_traceback_with_debug(trained, tmp_path, capsys):
    sets, _ = trained
    garbage = tmp_path / "random.pt"
    garbage.write_bytes(b"\x80\x04" + bytes(range(256)) * 4)
    args = ("translate", *sets, "--checkpoint", str(garbage), "--input", str(garbage))
    with warnings.catch_warnings(record=True) as caught:  # a warning printed before the error breaks the one line
        warnings.simplefilter("always")
        status, out, err = _cli(capsys, *args)
    assert [str(w.message) for w in caught] == []
    assert status == 2 and out == ""
    assert err.startswith(f"mma-nmt: error: checkpoint {garbage} is corrupt or truncated") and err.count("\n") == 1
    assert "Traceback" not in err and "weights_only" not in err
    with pytest.raises(RuntimeError, match="corrupt or truncated"):
        main([*args, "--debug"])


@pytest.mark.parametrize("override, message", [
    ("train.max_steps=-5", "train.max_steps must be at least 0, got -5"),
    ("train.label_smoothing=2", r"train.label_smoothing must be in \[0, 1\), got 2.0"),
    ("train.save_every=-1", "train.save_every must be at least 0, got -1"),
    ("train.keep_periodic=-1", "train.keep_periodic must be at least 0, got -1"),
    ("train.max_len=0", "train.max_len must be at least 1, got 0"),
    ("model.heads=0", "model.heads must be at least 1, got 0"),
    ("model.d_model=30", r"model.d_model \(30\) must be divisible by model.heads \(4\)"),
    ("decode.beam_size=0", "decode.beam_size must be at least 1, got 0"),
    ("decode.batch_size=0", "decode.batch_size must be at least 1, got 0"),
    ("decode.too_long=skip", "decode.too_long must be 'fail' or 'truncate', got 'skip'"),
    ("model.encoder.head_spec=GXQ", "model.encoder.head_spec must be a non-empty string of the letters G, L, F, B, C; "
                                    "got 'GXQ'"),
])
def test_numeric_and_spec_config_values_are_checked_where_read(override, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        load_run_config(None, [override])


CHOICE_ERRORS = [
    ("model.encoder.attention=mmx", "model.encoder.attention must be one of ['mma', 'multihop', 'standard'], got 'mmx'"),
    ("model.decoder.cross_attention=sparse", "model.decoder.cross_attention must be one of ['gmm', 'mlmha', 'standard'], "
                                             "got 'sparse'"),
    ("model.implementation=cuda", "model.implementation must be one of ['fused', 'reference', 'torch'], got 'cuda'"),
    ("train.optim.schedule=linear", "train.optim.schedule must be one of ['constant', 'cosine', 'inverse_sqrt', "
                                    "'plateau'], got 'linear'"),
    ("train.loss_normalization=words", "train.loss_normalization must be 'sentences' or 'tokens', got 'words'"),
    ("decode.length_penalty=gnmt", "decode.length_penalty must be one of ['avg', 'fairseq', 'none', 'wu'], got 'gnmt'"),
    ("eval.detokenize=Moses", "eval.detokenize must be 'moses' or 'none', got 'Moses'"),
]


@pytest.mark.parametrize("override, message", CHOICE_ERRORS)
def test_a_choice_outside_its_literal_names_the_key_the_value_and_the_choices(override, message):
    with pytest.raises(ValueError) as raised:
        load_run_config(None, [override])
    assert str(raised.value) == message


def test_a_bad_choice_in_a_config_file_or_on_the_command_line_is_one_error_line(tmp_path, capsys):
    from mma_nmt.training.config import run_config_from_dict

    with pytest.raises(ValueError, match=r"^model.encoder.layer_aggregation must be one of \['iterative', 'linear', "
                                         r"'none', 'transparent'\], got 'average'$"):
        run_config_from_dict({"model": {"preset": "transformer_tiny", "encoder": {"layer_aggregation": "average"}}})
    path = tmp_path / "run.toml"
    path.write_text('[model]\npreset = "lstm_tiny"\nattention = "bahdanau"\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"^model.attention must be 'luong', got 'bahdanau'$"):
        load_run_config(path)
    status, out, err = _cli(capsys, "train", "--config", str(path))
    assert status == 2 and out == ""
    assert err == "mma-nmt: error: model.attention must be 'luong', got 'bahdanau'\n"
    status, out, err = _cli(capsys, "translate", "--set", "model.encoder.attention=mmx")
    assert (status, out) == (2, "")
    assert err == f"mma-nmt: error: {CHOICE_ERRORS[0][1]}\n"


def test_configs_built_in_python_check_their_choices_too():
    from mma_nmt.decoding.search import SearchConfig
    from mma_nmt.models.config import EncoderConfig
    from mma_nmt.modules import MultiHopAttentionConfig

    with pytest.raises(ValueError, match=r"^decode.too_long must be 'fail' or 'truncate', got 'skip'$"):
        SearchConfig(too_long="skip")
    with pytest.raises(ValueError, match=r"^model.encoder.attention must be one of \['mma', 'multihop', 'standard'\], "
                                         r"got 'mmx'$"):
        EncoderConfig(attention="mmx")
    with pytest.raises(ValueError, match=r"^implementation must be 'fused' or 'reference', got 'cuda'$"):
        MultiHopAttentionConfig(embed_dim=8, num_heads=2, implementation="cuda")


def test_bootstrap_samples_below_one_are_refused(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["evaluate", "--bootstrap-samples", "0"])
    assert stop.value.code == 2 and "--bootstrap-samples: must be at least 1, got 0" in capsys.readouterr().err
