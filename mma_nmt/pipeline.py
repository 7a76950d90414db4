"""The steps of a run, each from a :class:`~mma_nmt.training.config.RunConfig`: prepare the data, train, translate,
score, average checkpoints, and :func:`demo` (all of them in a row). The command line (``mma_nmt.cli``), the
experiments (``mma_nmt.experiments``) and the notebooks (``mma_nmt.demos``) call these; none of them calls another."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable

import torch

from mma_nmt.training.config import RunConfig


def prepare_data(run: RunConfig) -> Path:
    """Runs the data package's (idempotent) preparation described by the ``[data]`` section."""
    from mma_nmt.data import prepare

    return prepare(run.data)


def ensure_prepared(run: RunConfig, *, say: Callable[[str], None] = lambda text: None) -> None:
    """Prepares the data of ``run`` unless its prepared directory is complete (``say`` hears when it starts); a
    complete one must have been prepared with the settings ``[data]`` gives (ValueError naming the first that differ,
    see :mod:`mma_nmt.data.prepared_settings`)."""
    from mma_nmt.data.prepared_settings import check_prepared_matches, recorded_settings

    if recorded_settings(run.prepared_dir()) is None:
        say(f"preparing {run.data.corpus} into {run.prepared_dir()}")
        prepare_data(run)
    else:
        check_prepared_matches(run.data, run.prepared_dir())


def train(run: RunConfig) -> dict:
    """Trains (preparing the data first when it is not there); returns the last validation result. The run config
    is then written to ``<train.save_dir>/run_config.json`` (with absolute paths), so that the run directory alone
    can be exported or translated with (``mma-nmt export``, ``translate --model``)."""
    from mma_nmt.training.distributed import leave_process_group
    from mma_nmt.training.trainer import Trainer

    from mma_nmt.data.fileio import atomic_write_json
    from mma_nmt.run_directory import RUN_CONFIG_FILE

    ensure_prepared(run)
    trainer = Trainer(run)
    result = trainer.train()
    atomic_write_json(Path(run.train.save_dir) / RUN_CONFIG_FILE, absolute_run_config(run))  # for export/--model
    leave_process_group(trainer.info)  # under torchrun; a no-op in one process
    return result


def default_checkpoint(run: RunConfig) -> Path:
    """``<train.save_dir>/best.pt``, else ``last.pt``."""
    save_dir = Path(run.train.save_dir)
    best = save_dir / "best.pt"
    return best if best.is_file() else save_dir / "last.pt"


def default_hypotheses(run: RunConfig, split: str | None = None) -> Path:
    """Where :func:`translate` writes a split's translations: ``<train.save_dir>/translations/<split>.hyp.txt``."""
    return Path(run.train.save_dir) / "translations" / f"{split or run.eval.split}.hyp.txt"


def translate(run: RunConfig, *, checkpoint: str | None = None, output: str | None = None,
              split: str | None = None, input_file: str | None = None, progress: bool = False,
              say: Callable[[str], None] = lambda text: None) -> Path:
    """Translates a prepared split (or the raw sentences of ``input_file``) with ``[decode]`` settings; writes one line
    per sentence (atomically: the old file or the complete new one, never part of it), and attention maps of the first
    ``eval.attention_maps`` sentences of a split. An empty or whitespace-only input line gives an empty output line
    (``say`` hears how many there were). ``progress``: a progress bar over the sentences (on a terminal)."""
    from mma_nmt.data import ParallelDataset, Tokenizer
    from mma_nmt.data.fileio import atomic_write_lines
    from mma_nmt.decoding.translate import special_ids, translate_ids
    from mma_nmt.evaluation.attention_maps import write_attention_maps
    from mma_nmt.evaluation.scoring import moses_detokenize
    from mma_nmt.training.checkpoint import load_model

    split = split or run.eval.split
    if run.train.threads:
        torch.set_num_threads(run.train.threads)
    device = torch.device("cuda" if torch.cuda.is_available() and run.train.device != "cpu" else "cpu")
    if input_file:  # raw text: the corpus's word-level pre- and postprocessing around the model
        from mma_nmt.run_directory import parts_of_run
        from mma_nmt.translate_text import translate_file
        from mma_nmt.translator import Translator

        translator = Translator(parts_of_run(run, checkpoint=checkpoint or default_checkpoint(run), device=device),
                                device=device)
        out = Path(output) if output else Path(run.train.save_dir) / "translations" / (Path(input_file).name +
                                                                                       ".hyp.txt")
        return translate_file(translator, input_file, out, config=run.decode, progress=progress, say=say)
    prepared = run.prepared_dir()
    src_tok, tgt_tok = Tokenizer.load(prepared / "spm_src.model"), Tokenizer.load(prepared / "spm_tgt.model")
    model, _ = load_model(checkpoint or default_checkpoint(run), device=device, tokenizers=(src_tok, tgt_tok))
    data = ParallelDataset.load(prepared, split)
    hyps = translate_ids(model, list(data.src), run.decode, special_ids(data.tgt_tokenizer), device=device,
                         progress=progress)
    lines = [data.tgt_tokenizer.decode(h.tokens) for h in hyps]
    if run.eval.detokenize == "moses":
        meta = json.loads((prepared / "meta.json").read_text(encoding="utf-8"))
        lines = moses_detokenize(lines, meta.get("corpus", {}).get("tgt_lang", "en"))
    out = Path(output) if output else Path(run.train.save_dir) / "translations" / f"{split}.hyp.txt"
    atomic_write_lines(out, lines)  # a full disk raises NoSpaceLeft, naming the file, which is left as it was
    for i in range(min(run.eval.attention_maps, len(data))):
        write_attention_maps(model, data.src[i], hyps[i].tokens, src_tokenizer=data.src_tokenizer,
                             tgt_tokenizer=data.tgt_tokenizer, out_dir=out.parent / "attention", name=f"{split}_{i}")
    return out


def _same_count(lines: list[str], path, references: list[str], where) -> None:
    """Refuses to score ``lines`` against references of another length: pairs would shift or go missing."""
    if len(lines) != len(references):
        raise ValueError(f"{path} has {len(lines)} lines but the references ({where}) have {len(references)}: "
                         f"they must be one sentence per line, line for line")


def evaluate(run: RunConfig, *, hypotheses: str | None = None, references: str | None = None,
             baseline: str | None = None, split: str | None = None, bootstrap_samples: int = 1000,
             randomization_trials: int = 10000, use_split: bool = True) -> dict:
    """Scores a hypothesis file (default: :func:`default_hypotheses`) against references (default: the prepared
    split's target text): sacreBLEU BLEU with signature, tokenised BLEU, chrF (chrF++ with ``eval.chrf_word_order =
    2``), TER, BLEU by source-length bucket, and against ``baseline`` the paired bootstrap (``bootstrap_samples``
    resamples) and approximate randomization (``randomization_trials``) of BLEU, chrF and TER: ``"significance"``
    (:func:`~mma_nmt.evaluation.bootstrap.paired_tests` by test and metric), and the BLEU bootstrap again as
    ``"bootstrap"``. ``use_split=False`` (with ``references``) scores the two plain text files
    alone: no prepared split is read, so no BLEU by source length, and tokenised BLEU Moses-tokenises as English.
    Empty files are refused (nothing to score)."""
    from mma_nmt.data import ParallelDataset
    from mma_nmt.data.fileio import read_text_lines
    from mma_nmt.evaluation.bootstrap import METRICS, paired_tests
    from mma_nmt.analysis.buckets import bleu_by_source_length
    from mma_nmt.evaluation.scoring import score_corpus

    if references is None and not use_split:
        raise ValueError("evaluate without the prepared split needs a reference file (--ref)")
    split = split or run.eval.split
    hyp_path = hypotheses or default_hypotheses(run, split)
    hyps = read_text_lines(hyp_path)
    wants_split = references is None or (use_split and run.eval.buckets)
    data = ParallelDataset.load(run.prepared_dir(), split) if wants_split else None
    refs = read_text_lines(references) if references else data.tgt_text
    ref_source = references or f"split {split} of {run.prepared_dir()}"
    _same_count(hyps, hyp_path, refs, ref_source)
    if not hyps:
        raise ValueError(f"nothing to score: {hyp_path} and the references ({ref_source}) are both empty")
    base = read_text_lines(baseline) if baseline else None
    if base is not None:
        _same_count(base, baseline, refs, ref_source)
    lang = data.meta.get("corpus", {}).get("tgt_lang", "en") if data is not None else "en"
    tokenize = run.eval.bleu_tokenize
    result = score_corpus(hyps, refs, lang=lang, with_tokenized=run.eval.tokenized_bleu, tokenize=tokenize,
                          chrf_word_order=run.eval.chrf_word_order).as_dict()
    result["sentences"] = len(hyps)
    if data is not None and run.eval.buckets and len(data) == len(hyps):
        rows = bleu_by_source_length(data.src_text, hyps, refs, edges=run.eval.buckets, tokenize=tokenize)
        result["bleu_by_source_length"] = [vars(row) for row in rows]
    if baseline:
        tests = {test: paired_tests(base, hyps, refs, test=test, metrics=METRICS, samples=samples, tokenize=tokenize,
                                    chrf_word_order=run.eval.chrf_word_order)
                 for test, samples in (("bootstrap", bootstrap_samples), ("randomization", randomization_trials))}
        result["significance"] = tests
        bleu = tests["bootstrap"]["bleu"]
        result["bootstrap"] = {"baseline_bleu": bleu["baseline"], "system_bleu": bleu["system"],
                               **{key: bleu[key] for key in ("system_mean", "system_ci", "baseline_mean",
                                                             "baseline_ci", "p_value", "samples")}}
    return result


def average(inputs: list[str], output: str) -> Path:
    """Writes the average of the weights of the checkpoints ``inputs`` to ``output``."""
    from mma_nmt.training.checkpoint import average_checkpoints, save_checkpoint

    return save_checkpoint(average_checkpoints(inputs), output)


def absolute_run_config(run: RunConfig) -> dict:
    """The run config as a dict with absolute ``data.out_dir`` and ``train.save_dir``: recorded with a run's scores,
    it lets the notebooks find and load the run from anywhere. ``[data]`` holds the settings it was given (those
    left out are the prepared folder's, see :mod:`mma_nmt.data.prepared_settings`)."""
    from mma_nmt.config_io import to_dict

    config = to_dict(run)
    config["data"] = {**run.data.to_section(), "out_dir": str(run.prepared_dir().resolve())}
    config["train"]["save_dir"] = str(Path(run.train.save_dir).resolve())
    return config


def demo(run: RunConfig, *, say: Callable[[str], None] = lambda text: None) -> dict:
    """Prepares the data, trains, translates the ``eval.split`` split and scores it; ``say`` hears about each step.
    Returns the scores with ``minutes_total``, ``translations``, ``attention_maps`` and ``run_config``
    (:func:`absolute_run_config`)."""
    started = time.monotonic()
    say(f"preparing {run.data.corpus} into {run.prepared_dir()}")
    prepare_data(run)
    model = run.model
    say(f"training the tiny {model.encoder.attention.upper()} Transformer (encoder heads {model.encoder.head_spec}) "
        f"for {run.train.max_minutes:g} minutes")
    train(run)
    say(f"translating the {run.eval.split} split with beam {run.decode.beam_size}")
    hyp = translate(run, progress=True)
    scores = evaluate(run, hypotheses=str(hyp))
    scores["minutes_total"] = round((time.monotonic() - started) / 60.0, 2)
    scores["translations"] = str(hyp)
    scores["attention_maps"] = str(hyp.parent / "attention")
    scores["run_config"] = absolute_run_config(run)
    return scores
