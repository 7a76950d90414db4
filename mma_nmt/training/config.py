"""The run config: data preparation, model, training, decoding and evaluation settings in one file."""

from __future__ import annotations

import typing
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from mma_nmt.config_io import (apply_overrides, check_choices, deep_merge, from_dict, load_file, require_at_least,
                               to_dict)
from mma_nmt.config_types import CompileMode
from mma_nmt.data.prepare import PrepareConfig
from mma_nmt.decoding.compiled_search import check_search_compile
from mma_nmt.decoding.search import SearchConfig, check_min_len_fits
from mma_nmt.models.config import MODEL_CONFIGS, ModelConfig, upgrade_stored_model_config
from mma_nmt.models.presets import preset
from mma_nmt.training.early_stopping import BestMetric
from mma_nmt.training.optim import OptimConfig


DEFAULT_PRESET = "transformer_tiny"
# the summed loss of an update divided by its target "tokens" or its "sentences" (OpenNMT-py's -normalization sents)
LossNormalization = Literal["tokens", "sentences"]
# mixed precision of training: "bf16" (bfloat16 autocast, CUDA and CPU), "fp16" (float16 autocast + GradScaler, CUDA
# only) or false (float32); true is read as "fp16", as before "bf16" existed (mma_nmt.training.precision)
AmpMode = Literal["bf16", "fp16", False]
LoggerName = Literal["tensorboard"]  # mma_nmt.training.loggers


@dataclass
class TrainConfig:
    save_dir: str = "runs/train"
    max_steps: int = 0  # 0 = no limit; at least one of max_steps, max_epochs, max_minutes must be set
    max_epochs: int = 0
    max_minutes: float = 0.0  # wall-clock budget (for demos; a timed stop is not reproducible)
    max_tokens: int = 4096  # token budget per batch (per process)
    # pad each batch's source and target widths up to a multiple of this (the budget counts the padding): fewer
    # distinct batch shapes, each of which records its own CUDA graphs under compile = "reduce-overhead"; 1 = off
    length_multiple: int = 1
    update_freq: int = 1  # batches accumulated per update: effective batch = max_tokens x update_freq x processes
    max_len: int = 256  # training pairs longer than this are skipped
    seed: int = 1
    label_smoothing: float = 0.1
    loss_normalization: LossNormalization = "tokens"
    optim: OptimConfig = field(default_factory=OptimConfig)
    log_every: int = 50
    save_every: int = 0  # steps between checkpoints; 0 = at the end of each epoch and of training only
    keep_periodic: int = 2  # step_<n>.pt files kept
    validate_every: int = 0  # steps between validations; 0 = at the end of each epoch
    best_metric: BestMetric = "nll"  # "bleu" needs bleu_sentences > 0: picks best.pt and drives patience
    patience: int = 0  # stop after this many validations in a row without a new best; 0 = off
    bleu_sentences: int = 200  # validation sentences translated for BLEU during training; 0 = loss only
    max_bad_steps: int = 10  # skipped steps (NaN/inf loss or gradient, loss spike) tolerated; one more stops the run
    loss_spike_factor: float = 0.0  # > 0: skip a step whose loss exceeds this factor x the recent mean; 0 = off
    loss_spike_window: int = 100  # applied steps in that mean; the rule starts once this many were applied
    amp: AmpMode | bool = False  # "bf16" | "fp16" | false; true: deprecated spelling of "fp16"
    device: str = "auto"  # "auto" | "cpu" | "cuda"
    threads: int = 0  # torch threads on CPU; 0 = torch's default
    progress: bool = True  # tqdm progress bar
    resume: bool = True  # continue from save_dir/last.pt when it exists; false refuses a save_dir holding checkpoints
    overwrite: bool = False  # with resume = false: delete the checkpoints of save_dir and start over (--overwrite)
    compile: CompileMode = False  # train through torch.compile(model, mode=...): compiled forward and backward
    # torch.use_deterministic_algorithms(True) while training: GPU runs of one config repeat bit for bit, at a cost in
    # speed (attention's tiled backward; mma_nmt.training.determinism); an operator with no deterministic form raises
    deterministic: bool = False
    # live views beside log.jsonl: ["tensorboard"] writes save_dir/tensorboard (pip install "mma_nmt[tensorboard]")
    loggers: list[LoggerName] = field(default_factory=list)

    def __post_init__(self):
        if self.amp is True:  # earlier configs (and their run records) say amp = true: float16, as it meant then
            warnings.warn('train.amp = true is deprecated: it means "fp16" (float16 autocast with a GradScaler, CUDA '
                          'only); write train.amp = "fp16", or "bf16" for bfloat16', FutureWarning, stacklevel=3)
            self.amp = "fp16"
        check_choices("train", self)
        for name in self.loggers:
            if name not in typing.get_args(LoggerName):
                raise ValueError(f"train.loggers: unknown logger {name!r}; known: {list(typing.get_args(LoggerName))}")
        if not (self.loss_spike_factor == 0 or self.loss_spike_factor > 1):  # NaN fails too
            raise ValueError(f"train.loss_spike_factor must be 0 (off) or above 1, got {self.loss_spike_factor}")
        require_at_least("train", self, loss_spike_window=1, max_steps=0, max_epochs=0, max_minutes=0.0, max_tokens=1,
                         length_multiple=1, max_len=1, log_every=1, save_every=0, keep_periodic=0, validate_every=0,
                         bleu_sentences=0, max_bad_steps=0, threads=0)
        if not 0 <= self.label_smoothing < 1:
            raise ValueError(f"train.label_smoothing must be in [0, 1), got {self.label_smoothing!r}")
        if self.update_freq < 1:
            raise ValueError(f"train.update_freq must be at least 1, got {self.update_freq}")
        if self.optim.decay_start_epoch and self.validate_every:
            raise ValueError("train.optim.decay_start_epoch cuts the lr once per epoch: it needs train.validate_every "
                             f"= 0 (one validation per epoch), got {self.validate_every}")
        if self.patience < 0:
            raise ValueError(f"train.patience must be 0 (off) or positive, got {self.patience}")
        if self.best_metric == "bleu" and self.bleu_sentences <= 0:
            raise ValueError("train.best_metric='bleu' needs train.bleu_sentences > 0 (validation BLEU)")


@dataclass
class EvalConfig:
    split: str = "test"
    detokenize: Literal["none", "moses"] = "none"  # "moses": Moses-detokenise outputs after SentencePiece decoding
    tokenized_bleu: bool = True  # also report BLEU on Moses-tokenised text (multi-bleu style, as the papers)
    # sacreBLEU tokenizer of the BLEU column (and its bootstrap and buckets): "13a" (its default), "ja-mecab" for
    # Japanese (word-segmented BLEU, as WAT's; needs pip install "mma_nmt[ja]"), "zh", "char", "none", ...
    bleu_tokenize: str = "13a"
    # word n-gram order of chrF (sacreBLEU's CHRF(word_order=...)): 0 is chrF, 2 is chrF++ (Popovic 2017). The "chrf"
    # score, its signature and its significance tests follow it.
    chrf_word_order: int = 0
    attention_maps: int = 4  # PNG attention maps written for this many test sentences by translate
    buckets: list[int] = field(default_factory=lambda: [10, 20, 30, 40, 50])  # source-length bucket edges (GMM paper)

    def __post_init__(self):
        from sacrebleu.metrics import BLEU

        check_choices("eval", self)
        if self.bleu_tokenize not in BLEU.TOKENIZERS:
            raise ValueError(f"eval.bleu_tokenize must be one of sacreBLEU's tokenizers {list(BLEU.TOKENIZERS)}, got "
                             f"{self.bleu_tokenize!r}")
        if self.chrf_word_order not in (0, 1, 2):
            raise ValueError(f"eval.chrf_word_order must be 0 (chrF), 1 or 2 (chrF++), got {self.chrf_word_order!r}")


@dataclass
class RunConfig:
    # [data]: read by PrepareConfig.from_section, which keeps which settings the table gave (the others are the prepared
    # folder's); the default is an empty [data] table
    data: PrepareConfig = field(default_factory=lambda: PrepareConfig.from_section({}))
    model: ModelConfig = field(default_factory=lambda: preset(DEFAULT_PRESET))
    train: TrainConfig = field(default_factory=TrainConfig)
    decode: SearchConfig = field(default_factory=SearchConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)

    def __post_init__(self):
        if not isinstance(self.data, PrepareConfig):
            raise TypeError(f"RunConfig.data must be a PrepareConfig, got {type(self.data).__name__}: read a [data] "
                            f"table with PrepareConfig.from_section")
        check_min_len_fits(self.decode, getattr(self.model, "max_positions", None))
        check_search_compile(self.decode.compile, self.model.arch)

    def prepared_dir(self) -> Path:
        return Path(self.data.out_dir)


def model_config_from_dict(data: dict) -> ModelConfig:
    """``{"preset": name, ...fields}`` -> config: the preset's values with the given fields on top. Without a
    ``preset`` key the base is ``transformer_tiny`` for a Transformer and the dataclass defaults for another ``arch``
    (a stored LSTM config, ``to_dict`` of an ``LSTMConfig``, has no preset and no Transformer field to read);
    ``preset = ""`` starts from the dataclass defaults. Names of earlier versions (a stored config's) are read as
    today's (:func:`upgrade_stored_model_config`)."""
    data = dict(upgrade_stored_model_config(data))
    name = data.pop("preset", DEFAULT_PRESET if data.get("arch", "transformer") == "transformer" else "")
    base = to_dict(preset(name)) if name else {}
    merged = deep_merge(base, data)
    arch = merged.get("arch", "transformer")
    if arch not in MODEL_CONFIGS:
        raise ValueError(f"unknown model arch {arch!r}; known: {sorted(MODEL_CONFIGS)}")
    return from_dict(MODEL_CONFIGS[arch], merged, "model")


def run_config_from_dict(data: dict) -> RunConfig:
    data = dict(data)
    model = model_config_from_dict(data.pop("model", {}))
    sections = {"train": TrainConfig, "decode": SearchConfig, "eval": EvalConfig}
    unknown = sorted(set(data) - set(sections) - {"data"})
    if unknown:
        raise ValueError(f"unknown config section(s) {unknown}; known: data, model, train, decode, eval")
    built = {name: from_dict(cls, data.get(name, {}), name) for name, cls in sections.items()}
    return RunConfig(data=PrepareConfig.from_section(data.get("data", {})), model=model, **built)


def load_run_config(path: str | Path | None = None, overrides: list[str] | None = None) -> RunConfig:
    """Reads a TOML/YAML/JSON run config (or starts from defaults) and applies ``section.key=value`` overrides."""
    raw = load_file(path) if path else {}
    return run_config_from_dict(apply_overrides(raw, list(overrides or [])))
