"""Raw text given to ``translate --input`` gets the corpus's word-level preprocessing before SentencePiece, and the
outputs its postprocessing (issue 52, point 2). The corpus is a fake IWSLT14: its local files are the first Multi30k
pairs Moses-tokenised and lowercased (as the IWSLT14 builder writes them), declared so in its ``CorpusSpec``."""

from __future__ import annotations

import pytest

from mma_nmt.cli.main import main
from mma_nmt.data import CorpusSpec, PrepareConfig, prepare
from mma_nmt.data import corpora
from mma_nmt.data.fileio import read_text_lines
from mma_nmt.data.preprocess import TextPipeline
from mma_nmt.evaluation.scoring import moses_detokenize
from nmt_fixtures import MULTI30K, tiny_overrides

LINES, TRANSLATED = 60, 12
FAKE = CorpusSpec(name="fake_iwslt_de_en", src_lang="de", tgt_lang="en", splits={"train": "train", "valid": "valid"},
                  local_folder="fake_iwslt", preprocessing={lang: {"moses_tokenize": True, "lowercase": True,
                                                                   "escape": True} for lang in ("de", "en")})


def _sets(overrides) -> list[str]:
    return [item for o in overrides for item in ("--set", o)]


@pytest.fixture(scope="module")
def fake_run(tmp_path_factory):
    """(run-config overrides, raw German sentences, their translations through the prepared split, detokenised)."""
    from mma_nmt.data.fileio import iter_byte_lines

    patch = pytest.MonkeyPatch()
    patch.setitem(corpora.CORPORA, FAKE.name, FAKE)
    root = tmp_path_factory.mktemp("fake_iwslt")
    raw = {lang: [line.decode("utf-8") for _, line in zip(range(LINES), iter_byte_lines(MULTI30K / f"train.{lang}.gz"))]
           for lang in ("de", "en")}
    folder = root / "corpora" / FAKE.local_folder
    folder.mkdir(parents=True)
    for lang in ("de", "en"):
        made = TextPipeline(lang, moses_tokenize=True, lowercase=True, escape=True).apply(raw[lang])
        assert made != raw[lang]
        for split, lines in (("train", made), ("valid", made[:TRANSLATED])):
            (folder / f"{split}.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    data = prepare(PrepareConfig(corpus=FAKE.name, data_dir=str(root / "corpora"), out_dir=str(root / "data"),
                                 vocab_size=400, progress=False))
    overrides = tiny_overrides(data, root / "run", "train.max_steps=40", "decode.beam_size=2", "decode.max_len_b=5",
                               "decode.max_len_a=1.0", "eval.attention_maps=0", f"data.corpus={FAKE.name}",
                               f"data.data_dir={root / 'corpora'}")
    assert main(["train", *_sets(overrides)]) == 0
    assert main(["translate", *_sets(overrides), "--split", "valid", "--output", str(root / "split.hyp")]) == 0
    yield overrides, raw["de"][:TRANSLATED], moses_detokenize(read_text_lines(root / "split.hyp"), "en"), data
    patch.undo()


def test_raw_input_is_preprocessed_as_the_corpus_and_postprocessed(fake_run, tmp_path, capsys):
    overrides, raw_sources, expected, data = fake_run
    source, out = tmp_path / "raw.de", tmp_path / "raw.hyp"
    source.write_text("\n".join(raw_sources) + "\n", encoding="utf-8")
    assert main(["translate", *_sets(overrides), "--input", str(source), "--output", str(out)]) == 0, \
        capsys.readouterr().err
    assert read_text_lines(out) == expected
    assert len(set(expected)) > 1


def test_the_export_keeps_the_preprocessing_declaratively(fake_run, tmp_path, capsys):
    import json

    overrides, raw_sources, expected, data = fake_run
    run_dir = [o.split("=", 1)[1] for o in overrides if o.startswith("train.save_dir=")][0]
    assert main(["export", run_dir, str(tmp_path / "model")]) == 0, capsys.readouterr().err
    config = json.loads((tmp_path / "model" / "config.json").read_text(encoding="utf-8"))
    assert config["source_preprocessing"]["steps"] == [{"moses_tokenize": True, "lowercase": True, "escape": True}]
    assert config["target_postprocessing"] == {"lang": "en", "moses_detokenize": True, "unescape": True,
                                               "not_restored": ["lowercased"]}
    (tmp_path / "raw.de").write_text("\n".join(raw_sources) + "\n", encoding="utf-8")
    assert main(["translate", "--model", str(tmp_path / "model"), "--input", str(tmp_path / "raw.de"),
                 "--output", str(tmp_path / "raw.hyp")]) == 0
    assert read_text_lines(tmp_path / "raw.hyp") == expected
    assert "lowercased" in capsys.readouterr().err  # what the postprocessing cannot restore is said


def test_a_corpus_made_with_a_tool_we_lack_refuses_raw_text():
    from mma_nmt.data.text_processing import text_processing

    source = text_processing("small_enja_ja_en", {}).source
    with pytest.raises(ValueError, match="KyTea word segmentation.*--preprocessed"):
        source(["今日は"])
