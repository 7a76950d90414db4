"""The command line end to end on the tiny data: train, average, translate (with attention maps), evaluate; each prints a
summary for people and writes its JSON to a file (stdout only with ``--json``)."""

from __future__ import annotations

import json
import subprocess
import sys

from nmt_fixtures import tiny_data, tiny_overrides  # noqa: F401  (fixture)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mma_nmt", *args], capture_output=True, text=True, timeout=600)


def test_train_translate_evaluate_from_the_command_line(tmp_path, tiny_data):  # noqa: F811
    config = tmp_path / "run.toml"
    config.write_text(f'[data]\ncorpus = "multi30k_de_en"\nout_dir = "{tiny_data}"\n'
                      '[decode]\nbeam_size = 3\nmax_len_b = 5\nmax_len_a = 0.5\n'
                      '[eval]\nsplit = "valid"\nattention_maps = 2\n')
    sets = [item for o in tiny_overrides(tiny_data, tmp_path / "run", "train.max_steps=4", "train.save_every=2")
            for item in ("--set", o)]
    trained = _cli("train", "--config", str(config), *sets, "--json")
    assert trained.returncode == 0, trained.stderr[-3000:]
    assert "valid_loss" in json.loads(trained.stdout)

    averaged = _cli("average", str(tmp_path / "run" / "step_2.pt"), str(tmp_path / "run" / "step_4.pt"),
                    "--output", str(tmp_path / "avg.pt"))
    assert averaged.returncode == 0, averaged.stderr[-3000:]

    out = tmp_path / "valid.hyp.txt"
    translated = _cli("translate", "--config", str(config), *sets, "--checkpoint", str(tmp_path / "avg.pt"),
                      "--output", str(out), "--set", "decode.batch_size=256")
    assert translated.returncode == 0, translated.stderr[-3000:]
    lines = out.read_text(encoding="utf-8").split("\n")[:-1]
    assert len(lines) == 1014  # Multi30k validation sentences
    # A summary for people, the JSON in a file beside the translations.
    assert not translated.stdout.lstrip().startswith("{")
    assert "BLEU" in translated.stdout and "nrefs:1|case:mixed" in translated.stdout
    assert "chrF" in translated.stdout and "TER" in translated.stdout and "BLEU by source length" in translated.stdout
    scores_file = tmp_path / "valid.scores.json"
    assert str(scores_file) in translated.stdout and str(out) in translated.stdout
    assert json.loads(scores_file.read_text(encoding="utf-8"))["sentences"] == 1014
    maps = sorted(p.name for p in (tmp_path / "attention").iterdir())
    assert maps == [f"valid_{i}_{block}.png" for i in (0, 1) for block in ("cross", "decoder_self", "encoder_self")]

    raw = tmp_path / "raw.de"
    raw.write_text("Ein Hund läuft.\nZwei Männer spielen Fußball.\n", encoding="utf-8")
    from_text = _cli("translate", "--config", str(config), *sets, "--checkpoint", str(tmp_path / "avg.pt"),
                     "--input", str(raw))
    assert from_text.returncode == 0, from_text.stderr[-3000:]
    assert len((tmp_path / "run" / "translations" / "raw.de.hyp.txt").read_text().split("\n")[:-1]) == 2

    evaluated = _cli("evaluate", "--config", str(config), *sets, "--hyp", str(out), "--baseline", str(out),
                     "--bootstrap-samples", "50", "--json")
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    scores = json.loads(evaluated.stdout)
    assert scores["sentences"] == 1014 and scores["bleu_signature"].startswith("nrefs:1|case:mixed")
    assert scores["bootstrap"]["system_bleu"] == scores["bootstrap"]["baseline_bleu"] == scores["bleu"]
    assert scores["bleu_by_source_length"][0]["label"] == "(0, 10]"
    assert json.loads((tmp_path / "valid.scores.json").read_text(encoding="utf-8")) == scores

    as_text = _cli("evaluate", "--config", str(config), *sets, "--hyp", str(out), "--scores", str(tmp_path / "s.json"))
    assert as_text.returncode == 0, as_text.stderr[-3000:]
    assert as_text.stdout.startswith(f"BLEU  {scores['bleu']:6.2f}   nrefs:1")
    assert json.loads((tmp_path / "s.json").read_text(encoding="utf-8"))["bleu"] == scores["bleu"]


def test_bad_override_is_reported_by_the_command_line(tmp_path):
    result = _cli("train", "--set", "model.encoder.attenton=mma", "--set", f"train.save_dir={tmp_path}")
    assert result.returncode != 0 and "unknown key(s) ['attenton']" in result.stderr
