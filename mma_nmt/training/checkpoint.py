"""Checkpoints: written atomically, loadable with ``torch.load(weights_only=True)``, versioned, carrying the model
config; best/last/periodic retention; averaging."""

from __future__ import annotations

import os
import re
import warnings
from pathlib import Path

import torch

from mma_nmt.data.fileio import atomic_write_with
from mma_nmt.models.config import upgrade_stored_model_config

FORMAT_VERSION = 1


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be used: missing, corrupt or truncated, of another format version or another model."""


def save_checkpoint(payload: dict, path: str | Path) -> Path:
    """Writes ``payload`` (plus ``format_version``) atomically (temporary file, fsync, ``os.replace``, then fsync of the
    folder), so a kill at any moment leaves either the old or the new complete file."""
    payload = {"format_version": FORMAT_VERSION, **payload}
    path = atomic_write_with(path, lambda handle: torch.save(payload, handle))
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # makes the rename itself durable
    finally:
        os.close(dir_fd)
    return path


def load_checkpoint(path: str | Path, *, model_config: dict | None = None, map_location="cpu") -> dict:
    """Loads with ``weights_only=True`` and checks the format version; with ``model_config`` (a dict) also checks
    that the checkpoint was written for that model. Raises :class:`CheckpointError` with the reason."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist")
    try:
        with warnings.catch_warnings():  # torch's note on a foreign pickle protocol would precede our own error
            warnings.filterwarnings("ignore", message="Detected pickle protocol", category=UserWarning)
            payload = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as error:  # zip, pickle and unpickler errors all mean the same thing here
        foreign = _refused_global(error)
        if foreign is not None:
            raise CheckpointError(f"{path} is not a trusted mma_nmt checkpoint: it asks the unpickler for the Python "
                                  f"global {foreign}, which no checkpoint of ours holds, so nothing of it was loaded; "
                                  f"use a checkpoint written by mma-nmt train or average") from None
        raise CheckpointError(f"checkpoint {path} is corrupt or truncated and cannot be read "
                              f"({_load_failure(error)})") from error
    if not isinstance(payload, dict) or "format_version" not in payload:
        raise CheckpointError(f"{path} is not an mma_nmt checkpoint (no format_version)")
    if payload["format_version"] != FORMAT_VERSION:
        raise CheckpointError(f"checkpoint {path} has format version {payload['format_version']}, but this mma_nmt "
                              f"reads version {FORMAT_VERSION}")
    if model_config is not None:
        check_same_model(payload.get("model_config"), model_config, path)
    return payload


_GLOBAL = re.compile(r"\bGLOBAL ([\w.]+)")


def _refused_global(error: Exception) -> str | None:
    """The Python global (``module.name``) that ``torch.load(weights_only=True)`` refused to load, if that is what
    ``error`` says: a file asking for one was not written by us (torch's advice to allow-list it is not relayed)."""
    found = _GLOBAL.search(str(error)) if "Weights only load failed" in str(error) else None
    return found.group(1) if found else None


def _load_failure(error: Exception) -> str:
    """What went wrong, without torch's advice to retry with ``weights_only=False``: that runs arbitrary code from the
    file, and a file that is no checkpoint of ours does not deserve it."""
    text = str(error)
    if "WeightsUnpickler error:" in text:
        text = "unpickling failed: " + text.split("WeightsUnpickler error:", 1)[1].split("Check the documentation")[0]
    return f"{type(error).__name__}: {' '.join(text.split())[:200]}"


def _differences(saved, wanted, prefix: str = "") -> list[str]:
    if isinstance(saved, dict) and isinstance(wanted, dict):
        out = []
        for key in sorted(set(saved) | set(wanted)):
            out += _differences(saved.get(key), wanted.get(key), f"{prefix}{key}.")
        return out
    return [] if saved == wanted else [f"{prefix.rstrip('.')}: checkpoint {saved!r} vs config {wanted!r}"]


def check_same_model(saved: dict | None, wanted: dict, path) -> None:
    """Raises :class:`CheckpointError` listing the fields in which model config ``saved`` (a checkpoint's) and
    ``wanted`` differ; the names of earlier versions count as today's (a checkpoint written before a rename still
    resumes)."""
    diffs = _differences(upgrade_stored_model_config(saved or {}), upgrade_stored_model_config(wanted))
    if diffs:
        raise CheckpointError(f"checkpoint {path} was written for a different model config: " + "; ".join(diffs[:8]))


def checkpoint_step(path: str | Path) -> int:
    """The ``step`` of a checkpoint, read without loading its tensors (memory-mapped)."""
    try:
        return int(torch.load(path, map_location="cpu", weights_only=True, mmap=True)["step"])
    except Exception as error:
        raise CheckpointError(f"checkpoint {path} is corrupt or truncated and cannot be read "
                              f"({_load_failure(error)})") from error


class CheckpointManager:
    """``last.pt`` after every save, ``best.pt`` when the validation metric improves, ``step_<n>.pt`` kept for the
    ``keep_periodic`` most recent saves (0 keeps none).

    Order of one save: ``best.pt``, ``step_<n>.pt``, then ``last.pt``, then the pruning of old periodic files.
    ``last.pt`` is what a run resumes from, so it is the commit point: a kill before its rename resumes from the
    previous save, replays the same steps and rewrites the same ``best.pt`` and ``step_<n>.pt``; a kill after it
    finds every file that ``last.pt`` relies on already in place (at worst one old periodic file too many, pruned by
    the next save). Temporary files left by a kill (``.last.pt.<random>.tmp`` ...) are never read and are removed
    by the next save."""

    TEMPORARY_PATTERNS = (".last.pt.*.tmp", ".best.pt.*.tmp", ".step_*.pt.*.tmp")  # see fileio._temp_beside

    def __init__(self, directory: str | Path, keep_periodic: int = 2):
        self.directory = Path(directory)
        self.keep_periodic = keep_periodic

    def periodic(self) -> list[Path]:
        paths = self.directory.glob("step_*.pt")
        return sorted(paths, key=lambda p: int(p.stem.split("_")[1]))

    def stale_temporaries(self) -> list[Path]:
        """Temporary files of this manager's checkpoints, left behind by a killed save."""
        return sorted(p for pattern in self.TEMPORARY_PATTERNS for p in self.directory.glob(pattern))

    def resume_point(self) -> Path | None:
        """The checkpoint a resumed run continues from: ``last.pt``; where a save failed (a full disk) before the first
        ``last.pt`` was written, the newest complete one of ``step_<n>.pt`` and ``best.pt`` (every file is written
        atomically, so each one present is whole and holds the full training state of its step); None when there is
        no checkpoint."""
        last = self.directory / "last.pt"
        if last.is_file():
            return last
        candidates = self.periodic()[-1:]
        best = self.directory / "best.pt"
        if best.is_file():
            candidates.append(best)
        if not candidates:
            return None
        return max(candidates, key=checkpoint_step)

    def save(self, payload: dict, step: int, *, is_best: bool = False) -> Path:
        for stale in self.stale_temporaries():
            stale.unlink(missing_ok=True)
        if is_best:
            save_checkpoint(payload, self.directory / "best.pt")
        if self.keep_periodic > 0:
            save_checkpoint(payload, self.directory / f"step_{step}.pt")
        last = save_checkpoint(payload, self.directory / "last.pt")
        if self.keep_periodic > 0:
            for old in self.periodic()[:-self.keep_periodic]:
                old.unlink(missing_ok=True)
        return last


def check_finite_weights(weights: dict, path) -> None:
    """Refuses (:class:`CheckpointError`) weights with a NaN or inf in a floating tensor, naming the first such tensor
    and how many of its values are not finite: such a model decodes to empty lines or fails inside the search."""
    for name, value in weights.items():
        if torch.is_tensor(value) and value.is_floating_point():
            bad = int((~torch.isfinite(value)).sum())
            if bad:
                raise CheckpointError(f"checkpoint {path} holds non-finite weights: {name} has {bad} NaN or inf "
                                      f"value(s) of {value.numel()}; use an earlier checkpoint of the run")


def _check_same_tokenizers(first: dict, first_path, payload: dict, path) -> None:
    """Refuses to average checkpoints trained with different SentencePiece models (their fingerprints differ)."""
    mine, theirs = first.get("tokenizers"), payload.get("tokenizers")
    if mine == theirs:
        return
    if mine is None or theirs is None:
        missing = first_path if mine is None else path
        raise CheckpointError(f"cannot average {first_path} and {path}: {missing} records no tokenizer fingerprints, "
                              f"so they may come from different SentencePiece models")
    sides = [side for side in ("src", "tgt") if mine.get(side) != theirs.get(side)]
    detail = "; ".join(f"{side} {mine.get(side)} vs {theirs.get(side)}" for side in sides)
    raise CheckpointError(f"cannot average {first_path} and {path}: they were trained with different SentencePiece "
                          f"models ({detail}); average checkpoints of one run")


def average_checkpoints(paths: list[str | Path]) -> dict:
    """The first checkpoint's payload with its model weights replaced by the mean over all ``paths``: refused unless
    every checkpoint has the same model config and tokenizer fingerprints and only finite weights."""
    if not paths:
        raise ValueError("average_checkpoints needs at least one path")
    first = load_checkpoint(paths[0])
    check_finite_weights(first["model"], paths[0])
    total = {k: v.double() if v.is_floating_point() else v.clone() for k, v in first["model"].items()}
    for path in paths[1:]:
        payload = load_checkpoint(path, model_config=first["model_config"])
        _check_same_tokenizers(first, paths[0], payload, path)
        check_finite_weights(payload["model"], path)
        for key, value in payload["model"].items():
            if value.is_floating_point():
                total[key] += value.double()
    averaged = {k: (v / len(paths)).to(first["model"][k].dtype) if v.is_floating_point() else v
                for k, v in total.items()}
    keep = {k: first[k] for k in ("model_config", "step", "tokenizers") if k in first}
    return {**keep, "model": averaged, "averaged_from": [str(p) for p in paths]}


def tokenizer_fingerprints(src_tokenizer, tgt_tokenizer) -> dict:
    """What a checkpoint records of the subword models it was trained with."""
    return {"src": src_tokenizer.fingerprint, "tgt": tgt_tokenizer.fingerprint}


def check_tokenizers(payload: dict, path, src_tokenizer, tgt_tokenizer) -> None:
    """Refuses (:class:`CheckpointError`) to run a checkpoint with tokenizers it was not trained with: another
    vocabulary size gives garbage or an ``IndexError``, another model of the same size garbage. Checkpoints from before
    the fingerprints were recorded are checked on the vocabulary sizes only."""
    config = payload.get("model_config", {})
    for side, tokenizer in (("src", src_tokenizer), ("tgt", tgt_tokenizer)):
        size = config.get(f"{side}_vocab_size")
        if size != tokenizer.vocab_size:
            raise CheckpointError(f"checkpoint {path} was trained with a {side} vocabulary of {size} pieces, but the "
                                  f"tokenizer {tokenizer.path or ''} has {tokenizer.vocab_size}: use the prepared data "
                                  f"(data.out_dir) the model was trained on")
        saved = payload.get("tokenizers", {}).get(side)
        if saved is not None and saved != tokenizer.fingerprint:
            raise CheckpointError(f"checkpoint {path} was trained with another {side} SentencePiece model than "
                                  f"{tokenizer.path or 'the one given'} (same size, other pieces): use the prepared "
                                  f"data (data.out_dir) the model was trained on")


def load_weights(model: torch.nn.Module, weights: dict, path) -> None:
    """``model.load_state_dict(weights)``, refusing weights that do not fit with one line (:class:`CheckpointError`)
    naming the checkpoint and the first misfits, instead of torch's message of one line per tensor."""
    try:
        model.load_state_dict(weights)
    except RuntimeError as error:
        lines = [line.strip().rstrip(".") for line in str(error).splitlines()[1:] if line.strip()]
        shown = "; ".join(lines[:3]) + (f"; and {len(lines) - 3} more" if len(lines) > 3 else "")
        raise CheckpointError(f"the weights of checkpoint {path} do not fit the model of its config: "
                              f"{' '.join(shown.split()) or str(error).strip()}") from error


def load_model(path: str | Path, device="cpu", *, tokenizers: tuple | None = None):
    """``(model in eval mode, model config)`` rebuilt from a checkpoint's config and weights, refused when a weight is
    NaN or inf (:func:`check_finite_weights`); with ``tokenizers`` (source, target) first checks that the checkpoint
    was trained with them (:func:`check_tokenizers`)."""
    from mma_nmt.models import build_model
    from mma_nmt.training.config import model_config_from_dict

    payload = load_checkpoint(path, map_location=device)
    check_finite_weights(payload["model"], path)
    if tokenizers is not None:
        check_tokenizers(payload, path, *tokenizers)
    config = model_config_from_dict({"preset": "", **payload["model_config"]})
    model = build_model(config).to(device)
    load_weights(model, payload["model"], path)
    return model.eval(), config
