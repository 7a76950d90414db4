"""``mma-nmt export RUN_DIR OUT_DIR``: a trained model as a self-contained folder, and reading such a folder back.

The folder holds:

- ``model.safetensors``: the weights, float32 as trained or rounded to float16 (``--dtype float16``: half the size;
  they are widened back to float32 when loaded, so the model computes in float32 with float16-rounded weights);
- ``spm_src.model``, ``spm_tgt.model``: the SentencePiece models;
- ``config.json``: ``format`` / ``format_version``, ``model`` (the model config), ``decode`` (the run's decode
  defaults), ``corpus`` (name and languages), ``tokenizers`` (the SentencePiece fingerprints), the word-level
  ``source_preprocessing`` / ``target_preprocessing`` / ``target_postprocessing`` the corpus needs (declarative,
  :mod:`mma_nmt.data.text_processing`), ``weights_dtype`` and ``exported_from`` (run directory, checkpoint, step).

Nothing of the prepared data folder is needed afterwards. The folder is written atomically (a temporary folder beside
it, renamed into place).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from mma_nmt.data.text_processing import TextProcessing

FORMAT, FORMAT_VERSION = "mma_nmt-export", 1
CONFIG_FILE, WEIGHTS_FILE = "config.json", "model.safetensors"
TOKENIZER_FILES = {"src": "spm_src.model", "tgt": "spm_tgt.model"}
WEIGHT_DTYPES = {"float32": torch.float32, "float16": torch.float16}


@dataclass
class ModelParts:
    """Everything translation needs, from a run directory or an export."""

    model: torch.nn.Module  # eval mode
    src_tokenizer: object
    tgt_tokenizer: object
    config: dict  # the export's config.json (a run directory's: the same keys)

    @property
    def processing(self) -> TextProcessing:
        return TextProcessing.from_dict(self.config)


def is_export(folder: str | Path) -> bool:
    return (Path(folder) / CONFIG_FILE).is_file() and (Path(folder) / WEIGHTS_FILE).is_file()


def export_run(run_dir: str | Path, out_dir: str | Path, *, checkpoint: str | Path | None = None,
               config: str | Path | None = None, overrides: list[str] | tuple = (), overwrite: bool = False,
               dtype: str = "float32", provenance: dict | None = None) -> Path:
    """Writes the export of ``run_dir`` (its :func:`~mma_nmt.run_directory.run_checkpoint` unless ``checkpoint``) to
    ``out_dir``, its floating-point weights stored as ``dtype`` (``float32`` or ``float16``); ``provenance`` replaces
    ``exported_from["run_dir"]`` (an absolute path on the exporting machine) with what the run stands for, e.g. its
    committed record. Refuses an existing non-empty ``out_dir`` unless ``overwrite``, weights holding NaN or inf, and
    weights that float16 would round to inf."""
    from safetensors.torch import save_model

    from mma_nmt.run_directory import load_run_parts

    if dtype not in WEIGHT_DTYPES:
        raise ValueError(f"export dtype must be one of {sorted(WEIGHT_DTYPES)}, got {dtype!r}")
    out = Path(out_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not overwrite:
        raise FileExistsError(f"{out} exists and is not empty: choose another folder or pass --overwrite")
    parts = load_run_parts(run_dir, checkpoint=checkpoint, config=config, overrides=overrides)
    _store_weights_as(parts.model, dtype, out)
    parts.config["weights_dtype"] = dtype
    if provenance is not None:
        parts.config["exported_from"] = {**parts.config["exported_from"], "run_dir": None, **provenance}
    out.parent.mkdir(parents=True, exist_ok=True)
    temporary = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        save_model(parts.model, str(temporary / WEIGHTS_FILE), metadata={"format": "pt"})
        os.chmod(temporary / WEIGHTS_FILE, 0o644)  # safetensors writes it owner-only; the folder is for sharing
        for side, tokenizer in (("src", parts.src_tokenizer), ("tgt", parts.tgt_tokenizer)):
            (temporary / TOKENIZER_FILES[side]).write_bytes(tokenizer.serialized())
        (temporary / CONFIG_FILE).write_text(json.dumps(parts.config, indent=2, sort_keys=True) + "\n",
                                             encoding="utf-8")
        os.chmod(temporary, 0o755)
        _replace(temporary, out)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise
    return out


def _store_weights_as(model: torch.nn.Module, dtype: str, out: Path) -> None:
    """Casts ``model``'s floating-point parameters and buffers to ``dtype`` in place; refuses a weight that the cast
    would turn into inf (float16 overflows above 65504)."""
    target = WEIGHT_DTYPES[dtype]
    for name, tensor in model.state_dict().items():
        if tensor.is_floating_point() and not torch.isfinite(tensor.to(target)).all():
            raise ValueError(f"cannot export {out} as {dtype}: weight {name} has values beyond {dtype}'s range "
                             f"(largest magnitude {tensor.abs().max().item():.4g}); export it as float32")
    model.to(target)


def _replace(temporary: Path, out: Path) -> None:
    """Renames ``temporary`` to ``out``; an existing ``out`` (allowed by ``overwrite``) is moved aside first and
    deleted once the new folder is in place."""
    if not out.exists():
        os.replace(temporary, out)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old.", dir=out.parent))
    os.replace(out, old / out.name)
    os.replace(temporary, out)
    shutil.rmtree(old, ignore_errors=True)


def load_export(folder: str | Path, *, device: torch.device | str = "cpu") -> ModelParts:
    """The :class:`ModelParts` of an exported folder; refuses another format, SentencePiece models other than the
    ones the model was exported with, and weights holding NaN or inf."""
    from safetensors.torch import load_model

    from mma_nmt.data import Tokenizer
    from mma_nmt.models import build_model
    from mma_nmt.training.checkpoint import check_finite_weights, check_tokenizers
    from mma_nmt.training.config import model_config_from_dict

    folder = Path(folder)
    missing = [name for name in (CONFIG_FILE, WEIGHTS_FILE, *TOKENIZER_FILES.values()) if not (folder / name).is_file()]
    if missing:
        raise FileNotFoundError(f"{folder} is not a complete mma_nmt export: {', '.join(missing)} missing (write it "
                                f"with mma-nmt export RUN_DIR {folder})")
    config = json.loads((folder / CONFIG_FILE).read_text(encoding="utf-8"))
    if config.get("format") != FORMAT or config.get("format_version") != FORMAT_VERSION:
        raise ValueError(f"{folder / CONFIG_FILE} is not an {FORMAT} version {FORMAT_VERSION} config (format "
                         f"{config.get('format')!r}, version {config.get('format_version')!r})")
    src, tgt = (Tokenizer.load(folder / TOKENIZER_FILES[side]) for side in ("src", "tgt"))
    check_tokenizers({"model_config": config["model"], "tokenizers": config["tokenizers"]}, folder, src, tgt)
    model = build_model(model_config_from_dict({"preset": "", **config["model"]}))
    load_model(model, str(folder / WEIGHTS_FILE), strict=True)
    check_finite_weights(model.state_dict(), folder / WEIGHTS_FILE)
    return ModelParts(model.to(device).eval(), src, tgt, config)
