"""Small trained models for the notebooks (``notebooks/``): each notebook names its model config; this module turns
it into a run config on Multi30k De-En (the first lines of the training split, a small joint BPE vocabulary), trains it
with the library's own pipeline (``prepare`` + :class:`~mma_nmt.training.trainer.Trainer`) or loads it from the cache
folder when a finished run of the same config is there.

A notebook first looks for a model trained for longer (``models_for_notebook``): the runs of ``mma-nmt experiment
<paper>`` and the demo's run (:mod:`mma_nmt.demos.trained_runs`), then the converged example models committed under
``examples/`` (:mod:`mma_nmt.demos.example_models`); it trains its own only when there is none.

Two sizes, chosen by ``MMA_NMT_NOTEBOOK_PRESET``: ``tiny`` (the default and what CI runs: seconds of training, a few
dozen sentences analysed) and ``full`` (the whole training split, thousands of updates: tens of minutes per model on
a CPU). Models trained for seconds translate badly; the notebooks say what to look for, not what the papers found.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from torch import nn

from mma_nmt.config_io import to_dict
from mma_nmt.data import ParallelDataset
from mma_nmt.demos.example_models import example_export, raw_test_split, read_card
from mma_nmt.demos.trained_runs import RunOnDisk, best_run
from mma_nmt.training.config import RunConfig, run_config_from_dict

PRESET_ENV = "MMA_NMT_NOTEBOOK_PRESET"
CACHE_ENV = "MMA_NMT_NOTEBOOK_CACHE"


@dataclass(frozen=True)
class NotebookScale:
    """How much data, training and analysis one preset means."""

    name: str
    train_lines: int | None  # first lines of the Multi30k training split (None: all 29,000)
    vocab_size: int  # joint BPE vocabulary
    steps: int  # updates per model
    max_tokens: int  # target tokens per batch
    warmup_steps: int
    lr: float
    test_sentences: int  # test sentences translated for BLEU
    analysis_sentences: int  # test pairs force-decoded for corpus-level analyses
    gold_pairs: int | None  # RWTH gold-aligned pairs scored for AER (None: all 508)


SCALES: dict[str, NotebookScale] = {
    "tiny": NotebookScale("tiny", train_lines=6000, vocab_size=1000, steps=100, max_tokens=1500, warmup_steps=40,
                          lr=0.003, test_sentences=100, analysis_sentences=40, gold_pairs=60),
    "full": NotebookScale("full", train_lines=None, vocab_size=4000, steps=3000, max_tokens=4096, warmup_steps=400,
                          lr=0.002, test_sentences=1000, analysis_sentences=500, gold_pairs=None),
}


# The notebooks' own models (``[model]`` sections), trained when no longer-trained run is found. 00 and 01 share the MMA
# model, so it is trained once.
MMA_TINY = {"preset": "transformer_tiny", "encoder": {"attention": "mma", "head_spec": "GLFB", "window": 1}}


def notebook_scale(name: str | None = None) -> NotebookScale:
    """The preset ``name``, else ``$MMA_NMT_NOTEBOOK_PRESET``, else ``tiny``."""
    name = name or os.environ.get(PRESET_ENV, "tiny")
    if name not in SCALES:
        raise ValueError(f"{PRESET_ENV} must be one of {sorted(SCALES)}, got {name!r}")
    return SCALES[name]


def cache_dir(default: str | Path = "../runs/notebooks/cache") -> Path:
    """``$MMA_NMT_NOTEBOOK_CACHE``, else ``default`` (relative to the notebook's folder)."""
    return Path(os.environ.get(CACHE_ENV, default))


def notebook_run(name: str, model: dict, scale: NotebookScale, cache: str | Path, **train) -> RunConfig:
    """Run config of notebook model ``name``: ``model`` is the ``[model]`` section (a preset plus fields), ``train``
    extra ``[train]`` fields. Prepared data goes to ``<cache>/data/...`` (shared by the notebooks), the run to
    ``<cache>/models/<name>-<preset>-<hash of the config>``, so a changed config never loads a stale model."""
    cache = Path(cache)
    prepared = cache / "data" / f"multi30k_de_en_bpe{scale.vocab_size}_{scale.train_lines or 'all'}"
    data = {"corpus": "multi30k_de_en", "out_dir": str(prepared),
            "vocab_size": scale.vocab_size, "joint_vocab": True, "max_train_lines": scale.train_lines,
            "splits": ["train", "valid", "test"], "progress": False, "workers": 1}
    train_section = {"max_steps": scale.steps, "max_tokens": scale.max_tokens, "threads": 1, "progress": False,
                     "bleu_sentences": 0, "log_every": max(scale.steps // 10, 1), "keep_periodic": 0,
                     "validate_every": 10**9,  # validation loss once, at the end
                     "label_smoothing": 0.1,
                     "optim": {"lr": scale.lr, "warmup_steps": scale.warmup_steps, "clip_norm": 1.0}, **train}
    run = run_config_from_dict({"data": data, "model": {"share_embeddings": True, **model}, "train": train_section,
                                "decode": {"beam_size": 1, "batch_size": 100}})
    identity = {"data": run.data.to_section(), "model": to_dict(run.model), "train": to_dict(run.train)}
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:10]
    run.train.save_dir = str(cache / "models" / f"{name}-{scale.name}-{digest}")
    return run


@dataclass
class TrainedModel:
    model: nn.Module  # eval mode, CPU
    run: RunConfig
    steps: int
    from_cache: bool
    seconds: float  # training time of this call (0 when loaded)
    valid_nll: float | None
    found: RunOnDisk | None = None  # the experiment or demo run it was loaded from (None: a notebook model)
    example: Path | None = None  # the example model's folder it was loaded from

    def dataset(self, split: str) -> ParallelDataset:
        if self.example is not None:
            return example_test_set(self.example, split)
        return ParallelDataset.load(self.run.prepared_dir(), split)

    def summary(self) -> str:
        if self.example is not None:
            card = read_card(self.example)
            return (f"loaded the example model {self.example} ({card['label']}; {card['run']['stopping']['best_update']}"
                    f" updates, trained to patience; test BLEU {card['export']['bleu']:.2f})")
        if self.found is not None:
            return f"loaded {self.found.describe()} ({self.steps} updates)"
        how = "loaded from " + self.run.train.save_dir if self.from_cache else f"trained in {self.seconds:.0f} s"
        nll = f", valid nll/token {self.valid_nll:.2f}" if self.valid_nll is not None else ""
        return (f"the notebook's own {self.run.train.max_steps}-update model ({self.steps} updates, {how}{nll}); "
                f"its BLEU is measured at the end of the notebook")


def load_found(found: RunOnDisk) -> TrainedModel:
    """The model of a finished experiment or demo run, with its run config (on the CPU, in eval mode)."""
    from mma_nmt.training.checkpoint import load_checkpoint, load_model

    config = json.loads(json.dumps(found.config))
    config["model"] = {"preset": "", **config.get("model", {})}
    run = run_config_from_dict(config)
    run.train.save_dir = str(found.run_dir)
    model, _ = load_model(found.checkpoint)
    step = load_checkpoint(found.checkpoint).get("step", 0)
    return TrainedModel(model=model, run=run, steps=step, from_cache=True, seconds=0.0, valid_nll=None, found=found)


def load_example(folder: Path) -> TrainedModel:
    """An example model (an export under ``examples/``) with a run config holding its model and decode settings."""
    from mma_nmt.export import load_export

    parts = load_export(folder)
    config = parts.config
    run = run_config_from_dict({"data": {"corpus": config["corpus"]["name"], "out_dir": str(folder)},
                                "model": {"preset": "", **config["model"]}, "decode": config["decode"]})
    step = config["exported_from"].get("step") or 0
    return TrainedModel(model=parts.model, run=run, steps=step, from_cache=True, seconds=0.0, valid_nll=None,
                        example=Path(folder))


def example_test_set(folder: Path, split: str) -> ParallelDataset:
    """The raw ``split`` (the test split only) of an example model's corpus, through its word-level preprocessing
    and SentencePiece models, as a dataset whose ``meta["corpus"]`` names the corpus and its languages, as a prepared
    split's does."""
    import torch

    from mma_nmt.translator import Translator

    if split != "test":
        raise ValueError(f"an example model comes with its corpus's test split only, not {split!r}")
    translator = Translator.from_pretrained(folder, device="cpu")
    sources, references = raw_test_split(translator.config["corpus"]["name"])
    targets = [torch.tensor(translator.tgt_tokenizer.encode(words), dtype=torch.long)
               for words in translator.processing.target(references)]
    return ParallelDataset(translator.encode(sources), targets, src_text=sources, tgt_text=references,
                           src_tokenizer=translator.src_tokenizer, tgt_tokenizer=translator.tgt_tokenizer, split=split,
                           meta={"corpus": dict(translator.config["corpus"]), "example": str(folder)})


@dataclass(frozen=True)
class NotebookModel:
    """A model a notebook wants: the ``systems`` of the paper's experiment that fit, the example model that stands
    for it (``example``: a name in :data:`~mma_nmt.demos.example_models.EXAMPLES`, or None), and its own model for
    when neither is on disk (``tiny_name``, ``tiny_model``: a ``[model]`` section, see :func:`notebook_run`).
    ``optional``: a model to compare with, left out when the notebook opens on the example models and it has none
    (the notebook then skips what needs it)."""

    systems: tuple[str, ...]
    tiny_name: str
    tiny_model: dict
    example: str | None = None
    optional: bool = False


def models_for_notebook(paper: str, wanted: dict[str, NotebookModel], scale: NotebookScale, cache: str | Path, *,
                        demo: bool = False, languages: set[str] | None = None) -> dict[str, TrainedModel]:
    """The models of a notebook by name. The first is the best finished run of its systems of ``mma-nmt experiment
    <paper>`` (or the demo's run when ``demo``), the others the best runs of theirs on the same prepared data, so
    that all translate the same test set. When one of them is not on disk, the example models (``examples/``) when
    every wanted model that is not ``optional`` has one there (the optional ones without one are left out); else the
    notebook's own models, all of them (trained, or loaded from the cache). ``languages``: see
    :func:`~mma_nmt.demos.trained_runs.best_run`."""
    names = list(wanted)
    if wanted[names[0]].optional:
        raise ValueError(f"the first model of a notebook is the one it studies and cannot be optional: {names[0]!r}")
    first = best_run(paper, wanted[names[0]].systems, demo=demo, languages=languages)
    found = {names[0]: first}
    for name in names[1:]:
        found[name] = None if first is None else best_run(paper, wanted[name].systems,
                                                          prepared=first.prepared_dir)
    if all(run is not None for run in found.values()):
        return {name: load_found(run) for name, run in found.items()}
    examples = {name: example_export(w.example) if w.example else None for name, w in wanted.items()}
    if all(examples[name] is not None for name, w in wanted.items() if not w.optional):
        return {name: load_example(folder) for name, folder in examples.items() if folder is not None}
    return {name: train_or_load(notebook_run(w.tiny_name, w.tiny_model, scale, cache)) for name, w in wanted.items()}


def train_or_load(run: RunConfig) -> TrainedModel:
    """Loads ``<save_dir>/last.pt`` when it holds a run finished to ``train.max_steps``; else prepares the data (once)
    and trains from scratch with :class:`~mma_nmt.training.trainer.Trainer`."""
    from mma_nmt.pipeline import prepare_data
    from mma_nmt.training.checkpoint import load_checkpoint, load_model
    from mma_nmt.training.trainer import Trainer

    last = Path(run.train.save_dir) / "last.pt"
    if last.is_file():
        payload = load_checkpoint(last)
        if payload["step"] >= run.train.max_steps:
            model, _ = load_model(last)
            best = payload.get("best")
            return TrainedModel(model=model, run=run, steps=payload["step"], from_cache=True, seconds=0.0,
                                valid_nll=best if best is not None and best < float("inf") else None)
    prepare_data(run)
    started = time.monotonic()
    trainer = Trainer(run)
    result = trainer.train()
    return TrainedModel(model=trainer.model.eval(), run=run, steps=trainer.step, from_cache=False,
                        seconds=time.monotonic() - started, valid_nll=result.get("valid_nll"))


def greedy_translations(trained: dict[str, TrainedModel], test: ParallelDataset, count: int) -> dict[str, list[str]]:
    """The first ``count`` sentences of ``test`` translated by every model with its run's decoding settings."""
    from mma_nmt.decoding.translate import translate_dataset

    return {name: translate_dataset(run.model, test, run.run.decode, limit=count) for name, run in trained.items()}
