"""prepare() on the real shared corpora: files written, subword round trip, idempotence, policies, missing splits."""

from __future__ import annotations

import gzip
import json
import shutil

import pytest
import torch

from mma_nmt.data import DataFormatError, ParallelDataset, PrepareConfig, Tokenizer, collate, prepare
from mma_nmt.data.corpora import default_data_dir
from mma_nmt.data.prepare import pipeline_for

DATA = default_data_dir()
pytestmark = pytest.mark.skipif(not (DATA / "multi30k").is_dir(), reason=f"shared corpora not found at {DATA}")
SMALL = dict(max_train_lines=3000, vocab_size=600, splits=("train", "valid", "test"), progress=False)


@pytest.fixture(scope="module")
def multi30k(tmp_path_factory):
    out = tmp_path_factory.mktemp("prep") / "multi30k_de_en"
    return prepare(PrepareConfig(corpus="multi30k_de_en", out_dir=str(out), **SMALL))


def test_prepare_multi30k_writes_every_file_with_consistent_contents(multi30k):
    names = {p.name for p in multi30k.iterdir()}
    expected = {"meta.json", "spm_src.model", "spm_tgt.model"} | {
        f"{split}.{side}.{ext}" for split in ("train", "valid", "test") for side in ("src", "tgt") for ext in ("pt", "txt")}
    assert expected <= names and not any(n.endswith(".tmp") for n in names)
    assert (multi30k / "spm_src.model").read_bytes() == (multi30k / "spm_tgt.model").read_bytes()  # joint
    meta = json.loads((multi30k / "meta.json").read_text())
    assert meta["vocab"]["src_size"] == 600 and meta["vocab"]["joint"]
    assert meta["splits"]["train"]["examples"] == 3000 and meta["splits"]["valid"]["examples"] == 1014
    assert meta["splits"]["test"]["examples"] == 1000 and meta["corpus"]["src_lang"] == "de"
    train = ParallelDataset.load(multi30k, "train")
    valid = ParallelDataset.load(multi30k, "valid")
    with gzip.open(DATA / "multi30k" / "val.en.gz", "rt", encoding="utf-8") as handle:
        assert valid.tgt_text == handle.read().split("\n")[:-1]  # raw references, untouched
    assert len(train) == 3000 and all(t.dtype == torch.int64 for t in train.src[:5])
    assert max(max(int(t.max()) for t in train.src), max(int(t.max()) for t in train.tgt)) < 600
    assert min(min(int(t.min()) for t in train.src), min(int(t.min()) for t in train.tgt)) >= 3  # no pad/bos/eos
    assert train.src_tokenizer.encode(train.src_text[0]) == train.src[0].tolist()


def test_sentencepiece_round_trip_on_real_text(multi30k):
    tokenizer = Tokenizer.load(multi30k / "spm_tgt.model")
    assert (tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id, tokenizer.unk_id) == (0, 1, 2, 3)
    test = ParallelDataset.load(multi30k, "test")
    for sentence in test.tgt_text[:200]:
        ids = tokenizer.encode(sentence)
        assert tokenizer.decode(ids) == " ".join(sentence.split())
        assert tokenizer.decode([1] + ids + [2, 0, 0]) == tokenizer.decode(ids)
    batch = collate(test, [0, 1, 2])
    assert tokenizer.decode(batch.tgt_out[0].tolist()) == " ".join(test.tgt_text[0].split())


def test_prepare_is_idempotent_and_redoes_only_what_changed(multi30k, tmp_path):
    out = tmp_path / "copy"
    shutil.copytree(multi30k, out)
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    prepare(PrepareConfig(corpus="multi30k_de_en", out_dir=str(out), **SMALL))
    after = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    assert {n: t for n, t in after.items() if n != "meta.json"} == {n: t for n, t in before.items() if n != "meta.json"}
    (out / "valid.src.pt").unlink()  # an interrupted run: only the missing split is rebuilt
    prepare(PrepareConfig(corpus="multi30k_de_en", out_dir=str(out), **SMALL))
    again = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    assert again["train.src.pt"] == before["train.src.pt"] and again["spm_src.model"] == before["spm_src.model"]
    assert (out / "valid.src.pt").is_file()
    prepare(PrepareConfig(corpus="multi30k_de_en", out_dir=str(out), **{**SMALL, "vocab_size": 500}))
    assert Tokenizer.load(out / "spm_src.model").vocab_size == 500
    assert json.loads((out / "meta.json").read_text())["vocab"]["src_size"] == 500


def test_separate_unigram_vocabularies_on_en_ja(tmp_path):
    config = dict(corpus="small_enja_en_ja", model_type="unigram", joint_vocab=False, max_train_lines=2000,
                  splits=("train", "test"), progress=False)
    with pytest.raises(ValueError, match="vocab_size=300 is too small for the characters"):
        prepare(PrepareConfig(out_dir=str(tmp_path / "tiny"), vocab_size=300, **config))
    out = prepare(PrepareConfig(out_dir=str(tmp_path / "enja"), vocab_size=1200, **config))
    src, tgt = Tokenizer.load(out / "spm_src.model"), Tokenizer.load(out / "spm_tgt.model")
    assert (out / "spm_src.model").read_bytes() != (out / "spm_tgt.model").read_bytes()
    assert src.vocab_size <= 1200 and tgt.vocab_size == 1200
    test = ParallelDataset.load(out, "test")
    assert len(test) == 500 and test.meta["vocab"]["model_type"] == "unigram"
    assert tgt.decode(test.tgt[0].tolist()) == test.tgt_text[0]


def test_moses_tokenize_and_lowercase_before_subwords(tmp_path):
    out = prepare(PrepareConfig(corpus="multi30k_en_de", out_dir=str(tmp_path / "moses"), moses_tokenize=True,
                                lowercase=True, max_train_lines=1000, vocab_size=500, splits=("train", "valid"),
                                progress=False))
    valid = ParallelDataset.load(out, "valid")
    assert valid.meta["preprocess"] == {"moses_tokenize": True, "lowercase": True}
    pipeline = pipeline_for(out, "src")
    decoded = valid.src_tokenizer.decode(valid.src[0].tolist())
    assert decoded == pipeline(valid.src_text[0]) and decoded == decoded.lower()
    assert valid.src_text[0] != decoded  # the reference text stays raw
    assert pipeline.postprocess("it 's a dog , isn 't it ?") == "it's a dog, isn't it?"


def test_missing_train_split_explains_what_to_do(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"splits \['train'\] not found .*download=True"):
        prepare(PrepareConfig(corpus="iwslt14_de_en", out_dir=str(tmp_path / "x"), progress=False))


def test_eval_only_corpus_with_subwords_trained_on_valid(tmp_path):
    out = prepare(PrepareConfig(corpus="iwslt17_de_en", out_dir=str(tmp_path / "iwslt17"), splits=("valid",),
                                spm_train_split="valid", vocab_size=800, progress=False))
    valid = ParallelDataset.load(out, "valid")
    assert len(valid) == 888 and valid.src_tokenizer.vocab_size == 800
    with pytest.raises(KeyError, match="no prepared split 'test'"):
        ParallelDataset.load(out, "test")


def _bad_multi30k(root):
    folder = root / "multi30k"
    folder.mkdir(parents=True)
    good_de = [f"Ein Hund läuft {i}." for i in range(40)]
    good_en = [f"A dog runs {i}." for i in range(40)]
    for stem in ("val", "test_2016_flickr"):
        (folder / f"{stem}.de").write_text("\n".join(good_de) + "\n", encoding="utf-8")
        (folder / f"{stem}.en").write_text("\n".join(good_en) + "\n", encoding="utf-8")
    de = good_de[:10] + [""] + good_de[11:]
    (folder / "train.de").write_text("\n".join(de) + "\n", encoding="utf-8")
    (folder / "train.en").write_bytes(("\n".join(good_en[:20]) + "\n").encode() + b"\xff\n" +
                                      ("\n".join(good_en[21:]) + "\n").encode())
    return folder


def test_prepare_applies_the_error_policy(tmp_path):
    folder = _bad_multi30k(tmp_path / "data")
    config = dict(corpus="multi30k_de_en", data_dir=str(tmp_path / "data"), vocab_size=60, splits=("train", "valid"),
                  progress=False)
    with pytest.raises(DataFormatError, match=rf"{folder / 'train.de'}:11: empty_line"):
        prepare(PrepareConfig(out_dir=str(tmp_path / "fail"), on_error="fail", **config))
    out = prepare(PrepareConfig(out_dir=str(tmp_path / "skip"), on_error="skip", **config))
    meta = json.loads((out / "meta.json").read_text())
    assert meta["splits"]["train"]["examples"] == 38 and meta["splits"]["train"]["skipped_malformed"] == 2
    report = meta["reports"]["train"]
    assert report["counts"] == {"empty_line": 1, "invalid_utf8": 1}
    assert any(m.startswith(f"{folder / 'train.en'}:21: invalid_utf8") for m in report["messages"])


def test_max_len_drops_long_training_pairs_only(tmp_path):
    out = prepare(PrepareConfig(corpus="multi30k_de_en", out_dir=str(tmp_path / "short"), max_len=12,
                                **SMALL))
    meta = json.loads((out / "meta.json").read_text())
    train = ParallelDataset.load(out, "train")
    assert meta["splits"]["train"]["filtered_too_long"] > 0
    assert len(train) == 3000 - meta["splits"]["train"]["filtered_too_long"]
    assert max(len(t) for t in train.src + train.tgt) <= 12
    assert meta["splits"]["test"]["examples"] == 1000  # references are never filtered


def test_config_from_dict_rejects_unknown_keys():
    assert PrepareConfig.from_dict({"corpus": "multi30k_en_de", "splits": ["train"]}).splits == ("train",)
    with pytest.raises(ValueError, match="unknown PrepareConfig keys"):
        PrepareConfig.from_dict({"vocab": 10})
    with pytest.raises(ValueError, match="model_type"):
        prepare(PrepareConfig(model_type="wordpiece"))


def test_config_from_toml_section(tmp_path):
    path = tmp_path / "exp.toml"
    path.write_text('[data]\ncorpus = "iwslt17_de_en"\nvocab_size = 1000\nsplits = ["valid"]\n', encoding="utf-8")
    config = PrepareConfig.from_file(path, section="data")
    assert (config.corpus, config.vocab_size, config.splits) == ("iwslt17_de_en", 1000, ("valid",))


def test_tokenizer_pickles_for_dataloader_workers(multi30k):
    import pickle
    tokenizer = Tokenizer.load(multi30k / "spm_src.model")
    clone = pickle.loads(pickle.dumps(tokenizer))
    assert clone.encode("Ein Hund rennt.") == tokenizer.encode("Ein Hund rennt.") and clone.vocab_size == 600
