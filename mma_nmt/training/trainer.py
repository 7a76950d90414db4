"""The training loop: token-budget batches, label-smoothed cross-entropy, gradient clipping, optional mixed precision,
validation loss and BLEU, atomic checkpoints with exact resumption, data-parallel training under torchrun."""

from __future__ import annotations

import collections
import contextlib
import math
import random
import time
import typing
import warnings
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import torch
from torch.nn.parallel import DistributedDataParallel

from mma_nmt.config_io import to_dict
from mma_nmt.config_types import compile_options
from mma_nmt.data import ParallelDataset, TokenBatchSampler, collate
from mma_nmt.data.batch_shapes import EpochShapes, epoch_shapes
from mma_nmt.data.prepared_settings import check_prepared_matches
from mma_nmt.decoding.translate import translate_dataset
from mma_nmt.evaluation.scoring import corpus_bleu
from mma_nmt.models import build_model
from mma_nmt.models.lstm_attention import holds_reference_layout
from mma_nmt.training import distributed as dist
from mma_nmt.training.checkpoint import (CheckpointError, CheckpointManager, check_same_model, checkpoint_step,
                                         load_checkpoint, load_weights, tokenizer_fingerprints)
from mma_nmt.training.determinism import deterministic_algorithms
from mma_nmt.training.early_stopping import EarlyStopping
from mma_nmt.training.hardware import hardware
from mma_nmt.training.config import LossNormalization, RunConfig
from mma_nmt.training.loggers import build_loggers
from mma_nmt.training.logging import JsonLinesLogger
from mma_nmt.training.loss import label_smoothed_cross_entropy
from mma_nmt.training.optim import LRSchedule, build_optimizer
from mma_nmt.training.precision import mixed_precision
from mma_nmt.training.run_lock import RunDirectoryLock, claim_for_fresh_start


def check_usable_pairs(sampler: TokenBatchSampler, valid_data: ParallelDataset, max_len: int, prepared: Path) -> None:
    """Refuses (ValueError, with the counts) training data without a pair to train on, or validation data without a
    pair to validate on: the loop would validate and save for ever without taking a step."""
    kept = sampler.num_examples - sampler.num_filtered
    if kept == 0:
        raise ValueError(f"the train split of {prepared} has no usable pair: {sampler.num_examples} pairs, "
                         f"{sampler.num_filtered} of them longer than train.max_len={max_len} subword tokens")
    if len(valid_data) == 0:
        raise ValueError(f"the valid split of {prepared} has no pair to validate on")


NORMALIZATIONS = typing.get_args(LossNormalization)


class TrainingDiverged(RuntimeError):
    """More skipped steps (NaN/inf loss or gradient, loss spike) than ``train.max_bad_steps``, or parameters that are
    no longer finite when a checkpoint is due."""


class TrainingInterrupted(KeyboardInterrupt):
    """Ctrl-C during :meth:`Trainer.train`; ``str()`` says at which step, and which checkpoint a resumed run starts
    from."""

    def __init__(self, step: int, saved: tuple[int, Path] | None):
        self.step, self.saved = step, saved
        where = (f"the last checkpoint, {saved[1]}, holds step {saved[0]}" if saved is not None else
                 "no checkpoint was written yet")
        super().__init__(f"training stopped at step {step} (interrupted); {where}")


def check_resume_tokenizers(payload: dict, path, data: ParallelDataset, prepared: Path) -> None:
    """Refuses (:class:`CheckpointError`, naming both fingerprints and the ways out) to resume checkpoint ``path`` on
    prepared data whose subword models are not the ones it was trained with (another vocabulary size, or the same size
    with other pieces). Checkpoints from before the fingerprints were recorded are checked on the vocabulary sizes."""
    saved = payload.get("tokenizers") or {}
    now = tokenizer_fingerprints(data.src_tokenizer, data.tgt_tokenizer)
    sizes = {"src": data.src_tokenizer.vocab_size, "tgt": data.tgt_tokenizer.vocab_size}
    config = payload.get("model_config") or {}
    for side in ("src", "tgt"):
        if saved.get(side, now[side]) != now[side]:
            found = f"SentencePiece model {saved[side][:16]}, but {prepared} now holds {now[side][:16]}"
        elif config.get(f"{side}_vocab_size", sizes[side]) != sizes[side]:
            found = f"vocabulary of {config[f'{side}_vocab_size']} pieces, but {prepared} now holds {sizes[side]}"
        else:
            continue
        raise CheckpointError(
            f"cannot resume {path}: it was trained with the {side} {found} (the data was prepared again with other "
            f"settings); resuming would go on training on other token ids. Train in another train.save_dir, start over "
            f"in this one with --overwrite (train.resume=false, train.overwrite=true), or prepare the data as before")


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def with_vocabulary(config, dataset: ParallelDataset):
    """The model config with vocabulary sizes and the pad id of the prepared data."""
    return replace(config, src_vocab_size=dataset.src_tokenizer.vocab_size,
                   tgt_vocab_size=dataset.tgt_tokenizer.vocab_size, pad_id=dataset.tgt_tokenizer.pad_id)


def forward_backward(model, batches, *, epsilon: float, pad_id: int, info: dist.DistInfo, autocast=None,
                     scaler=None, normalization: str = "tokens", device: torch.device | None = None) -> torch.Tensor:
    """Losses of one update's batches (one batch, or the ``train.update_freq`` batches accumulated into one update),
    backward with the gradient of (summed loss over all batches and processes) / (all their target tokens).

    DDP averages gradients over processes, so each process scales its summed loss by ``world_size / total_tokens``;
    the result equals one process computing the whole global batch (fairseq's semantics: effective batch =
    ``max_tokens x update_freq x world_size``). Gradients are synchronised across processes at the last batch only.
    ``normalization="sentences"`` divides by the number of sentences instead (OpenNMT-py's ``-normalization sents``).
    Batches are moved to ``device`` when given (their token counts are read on the host first), their source lengths
    left on the host for a model that packs by them (``lengths_on_host``: the LSTM).

    Returns the global (loss, nll, tokens) sums as a float64 tensor on the loss's device, NaN or inf included: nothing
    here waits for the device (issue 48, point 2). The losses are summed on the device, the counts come from the host
    batches, and the logits of every position are computed (padding positions carry no loss and no gradient): a
    boolean index of the real positions would make the device report their number first."""
    batches = list(batches) if isinstance(batches, (list, tuple)) else [batches]
    if normalization not in NORMALIZATIONS:
        raise ValueError(f"train.loss_normalization must be one of {NORMALIZATIONS}, got {normalization!r}")
    count = (lambda b: b.num_tokens) if normalization == "tokens" else len
    local_count = torch.tensor([float(sum(count(batch) for batch in batches))], dtype=torch.float64)
    scale = info.world_size / float(dist.all_reduce_sum(local_count, info)[0])
    tokens = float(sum(batch.num_tokens for batch in batches))  # read before any batch reaches the device
    if device is not None:
        keep = host_fields(model)
        batches = [batch.to(device, non_blocking=True, keep_on_host=keep) for batch in batches]  # pageable: staged
    losses = None  # (loss, nll) sums, float64, on the device
    for index, batch in enumerate(batches):
        last = index == len(batches) - 1
        no_sync = model.no_sync() if not last and hasattr(model, "no_sync") else contextlib.nullcontext()
        with no_sync:
            with autocast or contextlib.nullcontext():
                logits = model(batch.src, batch.src_lengths, batch.tgt_in)  # (B, T, V)
                loss, nll = label_smoothed_cross_entropy(logits, batch.tgt_out, epsilon=epsilon, ignore_index=pad_id)
            sums = torch.stack([loss.detach(), nll.detach()]).double()  # (2,)
            losses = sums if losses is None else losses + sums
            # every process runs every backward, NaN or not, so that DDP's gradient all-reduce never waits on one
            (scaler.scale(loss * scale) if scaler is not None else loss * scale).backward()
    local = torch.cat([losses, losses.new_full((1,), tokens)])  # (3,): loss, nll, tokens (a fill: no copy to wait on)
    return dist.all_reduce_sum(local, info)


def unwrapped(model):
    """The model behind DDP (its ``module``); ``model`` itself otherwise (a compiled model forwards attribute
    lookups to the model it compiled)."""
    return getattr(model, "module", model)


def host_fields(model) -> tuple[str, ...]:
    """The batch fields ``model`` takes on the host: ``src_lengths`` for a model with ``lengths_on_host`` (the LSTM
    encoder packs by them), else none. ``model`` may be compiled or DDP-wrapped."""
    return ("src_lengths",) if getattr(unwrapped(model), "lengths_on_host", False) else ()


def compiled(model, mode):
    """``model`` as ``train.compile`` asks: itself (false), ``torch.compile(model)`` (true) or compiled in the named
    mode. "reduce-overhead" records CUDA graphs of the compiled forward and backward on a GPU (the step has no host
    read inside them, issue 48 point 2); on the CPU torch compiles the same graphs and runs them without CUDA graphs.
    A model with ``compile_decoder_step`` (the LSTM, whose decoder loops over the target in Python) compiles its
    decoder step instead and is returned itself."""
    options = compile_options(mode)
    if options is None:
        return model
    if hasattr(unwrapped(model), "compile_decoder_step"):
        unwrapped(model).compile_decoder_step(**options)
        return model
    return torch.compile(model, **options)


# torch's inductor warns past this many CUDA graphs recorded for distinct shapes (cudagraph_dynamic_shape_warn_limit)
_GRAPH_SHAPES_WARNED = 8


def warn_about_graph_recordings(shapes: EpochShapes, epoch: int, length_multiple: int) -> None:
    """Under compile = "reduce-overhead" each distinct batch shape records its own CUDA graphs (on a GPU): say how many
    this epoch has where that is more than torch's own warning allows, and what lowers it."""
    if shapes.distinct <= _GRAPH_SHAPES_WARNED:
        return
    warnings.warn(f'train.compile = "reduce-overhead": the batches of epoch {epoch} come in {shapes.distinct} distinct '
                  f"(sentences, source, target) shapes (train.length_multiple = {length_multiple}, padding "
                  f"{shapes.padding:.1%} of positions), and on a GPU each records its own CUDA graphs; a larger "
                  "train.length_multiple (8, 16) gives fewer shapes for more padding", stacklevel=2)


def capture_rng() -> dict:
    state = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict) -> None:
    # the generators take their states as CPU byte tensors, wherever the checkpoint was mapped to
    torch.set_rng_state(state["torch"].cpu())
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([cuda_state.cpu() for cuda_state in state["cuda"]])


@dataclass
class Meter:
    """Sums since the last log line."""

    loss: float = 0.0
    nll: float = 0.0
    tokens: float = 0.0
    steps: int = 0
    since: float = 0.0

    def add(self, totals: torch.Tensor) -> None:
        self.loss += float(totals[0])
        self.nll += float(totals[1])
        self.tokens += float(totals[2])
        self.steps += 1

    def summary(self) -> dict:
        elapsed = max(1e-9, time.monotonic() - self.since)
        tokens = max(1.0, self.tokens)
        return {"loss": self.loss / tokens, "nll": self.nll / tokens, "ppl": math.exp(min(50.0, self.nll / tokens)),
                "tokens_per_s": self.tokens / elapsed}


Hook = Callable[["Trainer"], None]


class Trainer:
    """``Trainer(run).train()``. Hooks are called as ``hook(trainer)`` after every update (``trainer.step`` is the
    number of updates done), after any checkpoint of that step was written; a hook with a ``close(trainer)`` method is
    closed once when :meth:`train` ends, after the last validation, also when it ends on an error. They read
    ``trainer.last_train_log`` and ``trainer.last_validation``, each ``(step, values)`` of the latest ``train`` log
    entry and validation, or None. The loggers of ``train.loggers`` (:mod:`mma_nmt.training.loggers`) are hooks after
    ``hooks``, on the main process only."""

    def __init__(self, run: RunConfig, *, hooks: tuple[Hook, ...] = ()):
        cfg = run.train
        self.run = run
        self.device = pick_device(cfg.device)
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        self.info = dist.init_distributed(self.device)
        self.hooks = (*hooks, *(build_loggers(cfg.loggers, cfg.save_dir) if self.info.is_main else ()))
        self.precision = mixed_precision(cfg.amp, self.device)  # train.amp: autocast and (float16) GradScaler
        self.scaler, self.autocast = self.precision.scaler, self.precision.autocast
        check_prepared_matches(run.data, run.prepared_dir())
        self.train_data = ParallelDataset.load(run.prepared_dir(), "train")
        self.valid_data = ParallelDataset.load(run.prepared_dir(), "valid")
        self.model_config = with_vocabulary(run.model, self.train_data)
        self.pad_id = self.model_config.pad_id
        torch.manual_seed(cfg.seed)
        random.seed(cfg.seed)  # Python's RNG is checkpointed too: seeded, two runs of one config match in full
        self.model = build_model(self.model_config).to(self.device)
        self.ddp = DistributedDataParallel(self.model) if self.info.enabled else self.model
        self.train_model = compiled(self.ddp, cfg.compile)  # its forward and backward train
        self.optimizer = build_optimizer(self.model.parameters(), cfg.optim)
        self.schedule = LRSchedule(self.optimizer, cfg.optim, total_steps=cfg.max_steps)
        self.sampler = TokenBatchSampler(self.train_data.src_lengths, self.train_data.tgt_lengths,
                                         max_tokens=cfg.max_tokens, seed=cfg.seed, max_len=cfg.max_len,
                                         num_replicas=self.info.world_size, rank=self.info.rank,
                                         length_multiple=cfg.length_multiple)
        check_usable_pairs(self.sampler, self.valid_data, cfg.max_len, run.prepared_dir())
        self.step, self.bad_steps, self.started = 0, 0, time.monotonic()
        self.early_stopping = EarlyStopping(best_metric=cfg.best_metric, patience=cfg.patience)
        self.last_validation: tuple[int, dict] | None = None  # (step, result) of the latest validation
        self.last_train_log: tuple[int, dict] | None = None  # (step, fields) of the latest "train" log entry
        # per-token losses of the last applied updates, for the loss-spike rule (only kept when the rule is on)
        self.recent_losses: collections.deque[float] = collections.deque(maxlen=cfg.loss_spike_window)
        self.save_dir = Path(cfg.save_dir)
        self.checkpoints = CheckpointManager(self.save_dir, keep_periodic=cfg.keep_periodic)
        self.logger = JsonLinesLogger(self.save_dir / "log.jsonl", enabled=self.info.is_main)
        self._resume_event: dict | None = None  # logged once the run directory's lock is held (see train)
        resume_from = self.checkpoints.resume_point() if cfg.resume else None
        self.resumed = resume_from is not None
        if self.resumed:
            self.load(resume_from)

    # ---- checkpoints -------------------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {"model_config": to_dict(self.model_config), "model": self.model.state_dict(),
                "optimizer": self.optimizer.state_dict(), "schedule": self.schedule.state_dict(),
                "sampler": self.sampler.state_dict(), "rng": dist.all_gather_objects(capture_rng(), self.info),
                "scaler": self.scaler.state_dict() if self.scaler else {}, "step": self.step,
                "bad_steps": self.bad_steps, **self.early_stopping.state_dict(),
                "recent_losses": list(self.recent_losses), "train_config": to_dict(self.run.train),
                "tokenizers": tokenizer_fingerprints(self.train_data.src_tokenizer, self.train_data.tgt_tokenizer)}

    def save(self, *, is_best: bool = False) -> None:
        """Writes the checkpoints of this step; refuses (TrainingDiverged) when a weight is NaN or inf, so that no
        checkpoint ever holds corrupted parameters (all processes hold the same weights, so all raise)."""
        bad = [name for name, param in self.model.named_parameters() if not bool(torch.isfinite(param).all())]
        if bad:
            raise TrainingDiverged(f"step {self.step}: parameters {bad[:5]} hold NaN or inf; no checkpoint written "
                                   f"({self.save_dir / 'last.pt'} keeps the last good state)")
        payload = self.state_dict()  # every process takes part (RNG states are gathered)
        if self.info.is_main:
            path = self.checkpoints.save(payload, self.step, is_best=is_best)
            self.logger.log("checkpoint", step=self.step, path=str(path), best=is_best)
        dist.barrier(self.info)

    def load(self, path: Path) -> None:
        """Restores everything needed to continue exactly: weights, optimizer, schedule, data position, RNG. Refuses
        (:class:`CheckpointError`) a checkpoint trained with other subword models than the prepared data's: training
        would go on with other token ids, and the next save would record the new tokenizers as the model's."""
        payload = load_checkpoint(path, map_location=self.device)
        check_resume_tokenizers(payload, path, self.train_data, self.run.prepared_dir())
        check_same_model(payload.get("model_config"), to_dict(self.model_config), path)
        if holds_reference_layout(payload["model"]):
            raise CheckpointError(
                f"{path} holds the LSTM attention in its earlier layout (written before the LSTM used "
                "LuongMultiheadAttention): its weights load for translation and evaluation, but its optimizer state "
                "has the earlier shapes, so training cannot resume from it; train in a new train.save_dir")
        load_weights(self.model, payload["model"], path)
        self.optimizer.load_state_dict(payload["optimizer"])
        self.schedule.load_state_dict(payload["schedule"])
        self.sampler.load_state_dict({**payload["sampler"], "rank": self.info.rank})
        rng = payload["rng"]
        restore_rng(rng[self.info.rank] if self.info.rank < len(rng) else rng[0])
        if self.scaler and payload.get("scaler"):
            self.scaler.load_state_dict(payload["scaler"])
        self.step, self.bad_steps = payload["step"], payload["bad_steps"]
        self.early_stopping.load_state_dict(payload)
        self.recent_losses.clear()
        self.recent_losses.extend(payload.get("recent_losses", []))
        self._resume_event = {"step": self.step, "path": str(path), "epoch": self.sampler.epoch}

    # ---- one update --------------------------------------------------------------------------------------------
    def train_step(self, batches) -> torch.Tensor | None:
        """One update on ``batches`` (one batch or a list accumulated into one update); returns the global (loss, nll,
        tokens) sums (a CPU float64 tensor), or None for a skipped bad step.

        Forward, backward and the gradient clipping are queued without waiting for the device; the step's one host
        read follows them: the four numbers (loss, nll, tokens, gradient norm) that the bad-step rules need to decide
        whether the optimizer steps. With ``train.amp``, a skipped step still updates the loss scale (as GradScaler
        does for an overflow), since the gradients were unscaled before the decision."""
        self.ddp.train()
        batches = batches if isinstance(batches, (list, tuple)) else [batches]
        device_totals = forward_backward(self.train_model, batches, epsilon=self.run.train.label_smoothing,
                                         pad_id=self.pad_id, info=self.info, autocast=self.autocast(),
                                         scaler=self.scaler, normalization=self.run.train.loss_normalization,
                                         device=self.device)
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        clip = self.run.train.optim.clip_norm
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip if clip > 0 else math.inf)
        read = torch.cat([device_totals, norm.detach().reshape(1).to(device_totals)]).tolist()  # the one host read
        totals, norm = torch.tensor(read[:3], dtype=torch.float64), read[3]
        if not math.isfinite(read[0]):
            return self._bad_step("loss is NaN or inf")
        spike = self._loss_spike(read[0] / read[2])
        if spike:
            return self._bad_step(spike)
        if not math.isfinite(norm) and self.scaler is None:
            return self._bad_step("gradient norm is NaN or inf")
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        self.schedule.step(self.step)
        if self.run.train.loss_spike_factor > 0:
            self.recent_losses.append(read[0] / read[2])
        return totals

    def _loss_spike(self, loss: float) -> str | None:
        """The reason to skip a step whose per-token loss exceeds ``loss_spike_factor`` times the mean of the last
        ``loss_spike_window`` applied steps (only once that many steps were applied), else None."""
        cfg = self.run.train
        if cfg.loss_spike_factor <= 0 or len(self.recent_losses) < cfg.loss_spike_window:
            return None
        mean = sum(self.recent_losses) / len(self.recent_losses)
        if loss <= cfg.loss_spike_factor * mean:
            return None
        return (f"loss spike: {loss:.4g} > train.loss_spike_factor={cfg.loss_spike_factor:g} x {mean:.4g} (mean of "
                f"the last {len(self.recent_losses)} steps)")

    def _bad_step(self, reason: str) -> None:
        """Drops the step's gradients (no update), counts and logs it; stops the run past ``max_bad_steps``."""
        self.optimizer.zero_grad(set_to_none=True)
        if self.scaler is not None:  # the gradients were unscaled: close GradScaler's step (backs off on inf/NaN)
            self.scaler.update()
        self.bad_steps += 1
        self.logger.log("bad_step", step=self.step, reason=reason, bad_steps=self.bad_steps)
        if self.bad_steps > self.run.train.max_bad_steps:
            raise TrainingDiverged(f"{self.bad_steps} skipped steps (NaN/inf loss or gradient, loss spikes), more "
                                   f"than train.max_bad_steps={self.run.train.max_bad_steps}; lower the learning rate "
                                   f"or check the data")
        return None

    # ---- validation --------------------------------------------------------------------------------------------
    @torch.no_grad()
    def validate(self) -> dict:
        """Validation loss and perplexity over the whole split (and BLEU on its first ``bleu_sentences``)."""
        cfg = self.run.train
        self.model.eval()
        sampler = TokenBatchSampler(self.valid_data.src_lengths, self.valid_data.tgt_lengths, shuffle=False,
                                    max_tokens=max(cfg.max_tokens, 2 + max(self.valid_data.src_lengths
                                                                           + self.valid_data.tgt_lengths)),
                                    num_replicas=self.info.world_size, rank=self.info.rank)
        sums = torch.zeros(3, dtype=torch.float64)
        for indices in sampler:
            batch = collate(self.valid_data, indices).to(self.device, keep_on_host=host_fields(self.model))
            with self.autocast():
                real = batch.tgt_out != self.pad_id  # (B, T)
                logits = self.model(batch.src, batch.src_lengths, batch.tgt_in, output_mask=real)  # (N, V)
                loss, nll = label_smoothed_cross_entropy(logits, batch.tgt_out[real], epsilon=cfg.label_smoothing,
                                                         ignore_index=self.pad_id)
            sums += torch.tensor([loss.item(), nll.item(), float(batch.num_tokens)], dtype=torch.float64)
        sums = dist.all_reduce_sum(sums, self.info)
        nll = float(sums[1] / sums[2])
        result = {"valid_loss": float(sums[0] / sums[2]), "valid_nll": nll, "valid_ppl": math.exp(min(50.0, nll))}
        if cfg.bleu_sentences > 0 and self.info.is_main:
            limit = min(cfg.bleu_sentences, len(self.valid_data))
            hyps = translate_dataset(self.model, self.valid_data, self.run.decode, device=self.device, limit=limit)
            result["valid_bleu"], _ = corpus_bleu(hyps, self.valid_data.tgt_text[:limit])
        dist.barrier(self.info)
        return result

    # ---- the loop ----------------------------------------------------------------------------------------------
    def stop_reason(self, started: float) -> str | None:
        """Why training ends now (``max_steps``, ``max_epochs``, ``max_minutes`` or ``patience``), or None."""
        cfg = self.run.train
        if cfg.max_steps and self.step >= cfg.max_steps:
            return "max_steps"
        if cfg.max_epochs and self.sampler.epoch >= cfg.max_epochs:
            return "max_epochs"
        if cfg.max_minutes and time.monotonic() - started >= 60.0 * cfg.max_minutes:
            return "max_minutes"
        if self.early_stopping.should_stop:
            return "patience"
        return None

    def _done(self, started: float) -> bool:
        return self.stop_reason(started) is not None

    def _validate_and_save(self) -> dict:
        result = self.validate()
        self.schedule.on_validation(result["valid_ppl"], epoch=self.sampler.epoch)
        is_best = self.early_stopping.update(result, self.step)
        self.logger.log("valid", step=self.step, epoch=self.sampler.epoch, lr=self.optimizer.param_groups[0]["lr"],
                        best=is_best, stale_validations=self.early_stopping.stale, **result)
        self.save(is_best=is_best)
        self.last_validation = (self.step, result)
        return result

    def _after_step(self, totals, meter: Meter, bar) -> None:
        cfg = self.run.train
        if totals is None:  # a skipped step: no update, so nothing new to log, validate, save or show the hooks
            return
        meter.add(totals)
        bar.update(1)
        postfix = {"loss": f"{float(totals[0] / totals[2]):.3f}", "tok_s": f"{meter.summary()['tokens_per_s']:.0f}"}
        if cfg.max_minutes and not cfg.max_steps:  # tqdm has no total to estimate from: show the time left
            postfix["left"] = f"{cfg.max_minutes - (time.monotonic() - self.started) / 60.0:.1f}min"
        bar.set_postfix(postfix, refresh=False)
        if meter.steps and (self.step % cfg.log_every == 0):
            stats = meter.summary()
            self.last_train_log = (self.step, self.logger.log("train", step=self.step, epoch=self.sampler.epoch,
                                                              lr=self.optimizer.param_groups[0]["lr"], **stats))
            meter.__init__(since=time.monotonic())
        if cfg.validate_every and self.step % cfg.validate_every == 0:
            self._validate_and_save()
        elif cfg.save_every and self.step % cfg.save_every == 0:
            self.save()
        for hook in self.hooks:
            hook(self)

    def train(self) -> dict:
        """Trains until max_steps / max_epochs / max_minutes; returns the last validation result. Holds the run
        directory's lock meanwhile (``RunDirectoryBusy`` when another run holds it); a run that does not resume
        refuses a directory with checkpoints unless ``train.overwrite``. Nothing is written to the run directory before
        the lock is held. Ctrl-C raises :class:`TrainingInterrupted`, which says where the run stopped."""
        with RunDirectoryLock(self.save_dir) if self.info.is_main else contextlib.nullcontext():
            if self.info.is_main and not self.resumed:
                for path in claim_for_fresh_start(self.save_dir, overwrite=self.run.train.overwrite):
                    self.logger.log("overwrite", path=str(path))
            if self._resume_event is not None:
                self.logger.log("resume", **self._resume_event)
                self._resume_event = None
            dist.barrier(self.info)
            try:
                with deterministic_algorithms(self.run.train.deterministic):
                    return self._train()
            except KeyboardInterrupt:
                raise TrainingInterrupted(self.step, self._resume_point()) from None
            finally:
                for hook in self.hooks:
                    if hasattr(hook, "close"):
                        hook.close(self)

    def _resume_point(self) -> tuple[int, Path] | None:
        """(step, file) of the checkpoint the next run resumes from, as it is on disk now (a Ctrl-C may have come after
        a save's rename, before the save returned)."""
        try:
            path = self.checkpoints.resume_point()
            return None if path is None else (checkpoint_step(path), path)
        except CheckpointError:
            return None

    def _train(self) -> dict:
        from tqdm import tqdm

        cfg = self.run.train
        if not (cfg.max_steps or cfg.max_epochs or cfg.max_minutes):
            raise ValueError("set train.max_steps, train.max_epochs or train.max_minutes")
        started = self.started = time.monotonic()
        shapes = epoch_shapes(self.sampler, self.train_data.src_lengths, self.train_data.tgt_lengths)
        if cfg.compile == "reduce-overhead" and self.device.type == "cuda" and self.info.is_main:
            warn_about_graph_recordings(shapes, self.sampler.epoch, cfg.length_multiple)
        self.logger.log("start", step=self.step, parameters=sum(p.numel() for p in self.model.parameters()),
                        world_size=self.info.world_size, model=to_dict(self.model_config),
                        hardware=hardware(str(self.device), cfg.threads),
                        batch_shapes={"epoch": self.sampler.epoch, "distinct": shapes.distinct,
                                      "batches": shapes.batches, "padding": round(shapes.padding, 4),
                                      "length_multiple": cfg.length_multiple})
        meter = Meter(since=time.monotonic())
        bar = tqdm(total=cfg.max_steps or None, initial=self.step, unit="step", dynamic_ncols=True,
                   disable=not (cfg.progress and self.info.is_main))
        with bar:
            while not self._done(started):
                epoch_done = self._train_epoch(started, meter, bar)
                if epoch_done and not cfg.validate_every:
                    self._validate_and_save()
        if self.last_validation is not None and self.last_validation[0] == self.step:
            result = self.last_validation[1]  # this step was validated and saved already
        else:
            result = self._validate_and_save()
        self.logger.log("end", step=self.step, minutes=(time.monotonic() - started) / 60.0,
                        stopped=self.stop_reason(started), best_step=self.early_stopping.best_step,
                        epoch=self.sampler.epoch, **result)
        return result

    def _train_epoch(self, started: float, meter: Meter, bar) -> bool:
        """Updates over the rest of the epoch, ``train.update_freq`` batches each (an epoch's last update may take
        fewer); returns whether the epoch ended (False: a stopping rule fired first)."""
        group = []
        for indices in self.sampler:
            group.append(indices)
            if len(group) < self.run.train.update_freq:
                continue
            self._after_step(self.train_step([self._collate(i) for i in group]), meter, bar)
            group = []
            if self._done(started):
                return False
        if group:
            self._after_step(self.train_step([self._collate(i) for i in group]), meter, bar)
        return True

    def _collate(self, indices):
        """A training batch, its widths padded to ``train.length_multiple`` (the sampler budgets for them)."""
        return collate(self.train_data, indices, length_multiple=self.run.train.length_multiple)
