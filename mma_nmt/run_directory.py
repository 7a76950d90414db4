"""A training run's directory (``train.save_dir``): its run config and the checkpoint that stands for it.

The run config is read from ``run_config.json`` (written there by :func:`mma_nmt.pipeline.train` when training ends)
or from an experiment cell's ``cell.json``; a run without either needs the config it was trained with.
"""

from __future__ import annotations

import json
from pathlib import Path

RUN_CONFIG_FILE = "run_config.json"


def run_config_of(run_dir: str | Path, config: str | Path | None = None, overrides: list[str] | tuple = ()):
    """The :class:`~mma_nmt.training.config.RunConfig` of ``run_dir`` (with ``train.save_dir = run_dir``): from
    ``config`` when given, else from the run's own ``run_config.json`` or ``cell.json``; ``overrides`` go on top."""
    from mma_nmt.config_io import apply_overrides, load_file, set_dotted
    from mma_nmt.training.config import run_config_from_dict

    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"run directory {run_dir} does not exist")
    if config is not None:
        raw = load_file(config)
    elif (run_dir / RUN_CONFIG_FILE).is_file():
        raw = json.loads((run_dir / RUN_CONFIG_FILE).read_text(encoding="utf-8"))
    elif (run_dir / "cell.json").is_file():
        raw = json.loads((run_dir / "cell.json").read_text(encoding="utf-8"))["config"]
    else:
        raise FileNotFoundError(f"{run_dir} holds no run config ({RUN_CONFIG_FILE}, written by mma-nmt train, or an "
                                f"experiment's cell.json): pass the config it was trained with (--config FILE)")
    raw = apply_overrides(raw, list(overrides))
    set_dotted(raw, "train.save_dir", str(run_dir))
    return run_config_from_dict(raw)


def run_checkpoint(run_dir: str | Path) -> Path:
    """The checkpoint a run was translated with: the one its ``result.json`` names (experiment cells), else
    ``best.pt``, else ``last.pt``."""
    run_dir = Path(run_dir)
    result = run_dir / "result.json"
    if result.is_file():
        named = json.loads(result.read_text(encoding="utf-8")).get("checkpoint")
        if named and (run_dir / named).is_file():
            return run_dir / named
    for name in ("best.pt", "last.pt"):
        if (run_dir / name).is_file():
            return run_dir / name
    raise FileNotFoundError(f"{run_dir} holds no checkpoint (best.pt or last.pt): train the run first")


def is_run_directory(folder: str | Path) -> bool:
    folder = Path(folder)
    return any((folder / name).is_file() for name in ("best.pt", "last.pt", RUN_CONFIG_FILE, "cell.json"))


def load_run_parts(run_dir: str | Path, *, checkpoint: str | Path | None = None, config: str | Path | None = None,
                   overrides: list[str] | tuple = (), device="cpu"):
    """The :class:`~mma_nmt.export.ModelParts` of a run: its checkpoint (refused when a weight is NaN or inf, or when
    it was trained with other SentencePiece models), the prepared folder's SentencePiece models, and the export's
    ``config.json`` keys (decode defaults, corpus, the word-level processing of ``meta.json``'s corpus and
    settings)."""
    return parts_of_run(run_config_of(run_dir, config, overrides), checkpoint=checkpoint, device=device)


def parts_of_run(run, *, checkpoint: str | Path | None = None, device="cpu"):
    """:func:`load_run_parts` of a :class:`~mma_nmt.training.config.RunConfig` (its ``train.save_dir``)."""
    import mma_nmt
    from mma_nmt.config_io import to_dict
    from mma_nmt.data import Tokenizer
    from mma_nmt.data.text_processing import text_processing
    from mma_nmt.export import FORMAT, FORMAT_VERSION, ModelParts
    from mma_nmt.training.checkpoint import load_checkpoint, load_model, tokenizer_fingerprints

    run_dir = Path(run.train.save_dir)
    prepared = run.prepared_dir()
    if not (prepared / "meta.json").is_file():
        raise FileNotFoundError(f"the prepared data of {run_dir} ({prepared}, data.out_dir) is missing: it holds the "
                                f"SentencePiece models; prepare it again (mma-nmt prepare) with the run's config")
    meta = json.loads((prepared / "meta.json").read_text(encoding="utf-8"))
    src, tgt = Tokenizer.load(prepared / "spm_src.model"), Tokenizer.load(prepared / "spm_tgt.model")
    path = Path(checkpoint) if checkpoint else run_checkpoint(run_dir)
    model, model_config = load_model(path, device=device, tokenizers=(src, tgt))
    corpus = meta["corpus"]
    processing = text_processing(corpus["name"], meta.get("preprocess", {}), eval_detokenize=run.eval.detokenize)
    info = {"format": FORMAT, "format_version": FORMAT_VERSION, "mma_nmt_version": mma_nmt.__version__,
            "model": to_dict(model_config), "decode": to_dict(run.decode),
            "corpus": {key: corpus[key] for key in ("name", "src_lang", "tgt_lang")},
            "tokenizers": tokenizer_fingerprints(src, tgt), **processing.as_dict(),
            "exported_from": {"run_dir": str(Path(run_dir).resolve()), "checkpoint": path.name,
                              "step": load_checkpoint(path).get("step")}}
    return ModelParts(model, src, tgt, info)
