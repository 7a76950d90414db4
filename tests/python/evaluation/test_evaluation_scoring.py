"""Scores: sacreBLEU's CLI agrees with our BLEU; tokenised BLEU, bootstrap and length buckets behave."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mma_nmt.evaluation.bootstrap import paired_bootstrap
from mma_nmt.evaluation.scoring import corpus_bleu, score_corpus, tokenized_bleu
from nmt_fixtures import MULTI30K


def _references(n: int = 200) -> list[str]:
    with gzip.open(MULTI30K / "test_2016_flickr.en.gz", "rt", encoding="utf-8") as f:
        return [next(f).rstrip("\n") for _ in range(n)]


def _system(refs: list[str]) -> list[str]:
    """A 'system output' that drops, swaps and keeps words in a fixed pattern."""
    out = []
    for i, ref in enumerate(refs):
        words = ref.split()
        if i % 3 == 0 and len(words) > 3:
            words = words[:-2]
        elif i % 3 == 1 and len(words) > 2:
            words[0], words[1] = words[1], words[0]
        out.append(" ".join(words))
    return out


def _sacrebleu_cli() -> list[str]:
    exe = Path(sys.executable).with_name("sacrebleu")
    return [str(exe)] if exe.exists() else [shutil.which("sacrebleu") or "sacrebleu"]


def test_bleu_equals_the_sacrebleu_command_line(tmp_path):
    refs = _references()
    hyps = _system(refs)
    (tmp_path / "ref.txt").write_text("\n".join(refs) + "\n", encoding="utf-8")
    (tmp_path / "hyp.txt").write_text("\n".join(hyps) + "\n", encoding="utf-8")
    cli = subprocess.run(_sacrebleu_cli() + [str(tmp_path / "ref.txt"), "-i", str(tmp_path / "hyp.txt"), "-m", "bleu",
                                             "-f", "json"], capture_output=True, text=True, check=True)
    reported = json.loads(cli.stdout)
    ours, signature = corpus_bleu(hyps, refs)
    assert 20.0 < ours < 95.0
    assert round(ours, 1) == pytest.approx(reported["score"], abs=1e-9)
    assert signature == reported["signature"]


def test_tokenized_bleu_splits_punctuation_like_moses():
    refs = ["A dog runs, fast."]
    assert tokenized_bleu(["A dog runs , fast ."], refs, "en") == pytest.approx(100.0)
    assert corpus_bleu(["A dog runs , fast ."], refs)[0] == pytest.approx(100.0)  # 13a splits these too
    assert tokenized_bleu(["A dog runs, fast."], ["A dog runs , fast ."], "en") == pytest.approx(100.0)


def test_score_corpus_reports_all_metrics():
    refs = _references(50)
    scores = score_corpus(_system(refs), refs).as_dict()
    assert scores.keys() >= {"bleu", "bleu_signature", "tokenized_bleu", "chrf", "ter"}
    perfect = score_corpus(refs, refs)
    assert perfect.bleu == pytest.approx(100.0) and perfect.ter == pytest.approx(0.0)


def test_paired_bootstrap_prefers_the_better_system():
    refs = _references(120)
    good, bad = refs[:60] + _system(refs[60:]), _system(_system(refs))
    result = paired_bootstrap(bad, good, refs, samples=200)
    assert result["system_bleu"] > result["baseline_bleu"]
    assert 0.0 <= result["p_value"] < 0.05


def test_paired_bootstrap_of_identical_outputs_is_not_significant():
    """sacreBLEU alone gives identical outputs p = 1 / (samples + 1); nothing distinguishes them, so p must be 1."""
    refs = _references(120)
    system = _system(refs)
    result = paired_bootstrap(list(system), list(system), refs, samples=200)
    assert result["p_value"] == 1.0 and result["system_bleu"] == result["baseline_bleu"]


JA_REFERENCES = ["私は東京大学の学生で、毎日電車で大学に通っています。", "今日は天気がいいので、公園まで散歩に出かけました。",
                 "この論文では新しい翻訳モデルを提案し、その性能を評価する。", "実験の結果、提案手法は従来手法より高い精度を示した。"]
JA_HYPOTHESES = ["私は東京大学の学生で、毎日バスで大学に通っています。", "今日は天気がいいので、公園まで散歩に行きました。",
                 "この論文では新しい翻訳モデルを提案し、その性能を評価した。", "実験の結果、提案手法は従来手法より高い精度を示した。"]


def test_japanese_bleu_counts_mecab_words():
    """Japanese has no spaces: 13a sees whole clauses as words, so one changed word costs the clause; ja-mecab (WAT's
    kind of word-segmented BLEU) counts the words that match."""
    pytest.importorskip("MeCab")
    pytest.importorskip("ipadic")
    clauses, _ = corpus_bleu(JA_HYPOTHESES, JA_REFERENCES)
    words, signature = corpus_bleu(JA_HYPOTHESES, JA_REFERENCES, tokenize="ja-mecab")
    assert "tok:ja-mecab" in signature
    assert words > 60.0 and words > clauses + 20.0


def test_eval_bleu_tokenize_reaches_bleu_and_its_bootstrap(tmp_path):
    from mma_nmt import pipeline
    from mma_nmt.training.config import load_run_config

    pytest.importorskip("MeCab")
    pytest.importorskip("ipadic")
    for name, lines in (("ref", JA_REFERENCES), ("hyp", JA_HYPOTHESES), ("base", JA_HYPOTHESES[:3] + ["実験。"])):
        (tmp_path / f"{name}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    run = load_run_config(None, ["eval.bleu_tokenize=ja-mecab", "eval.buckets=[]", "eval.tokenized_bleu=false"])
    result = pipeline.evaluate(run, hypotheses=str(tmp_path / "hyp.txt"), references=str(tmp_path / "ref.txt"),
                               baseline=str(tmp_path / "base.txt"), bootstrap_samples=50)
    assert "tok:ja-mecab" in result["bleu_signature"]
    assert result["bleu"] == pytest.approx(corpus_bleu(JA_HYPOTHESES, JA_REFERENCES, tokenize="ja-mecab")[0])
    assert result["bootstrap"]["system_bleu"] == pytest.approx(result["bleu"])
    with pytest.raises(ValueError, match="eval.bleu_tokenize must be one of"):
        load_run_config(None, ["eval.bleu_tokenize=kytea"])
