"""``train.loggers = ["tensorboard"]``: the run's curves as TensorBoard scalars in ``save_dir/tensorboard``
(``tensorboard --logdir <save_dir>/tensorboard``), by update:

- ``train/loss``, ``train/nll``, ``train/ppl``, ``train/lr``, ``train/tokens_per_s``: the ``train`` events of
  ``log.jsonl`` (means over the last ``train.log_every`` updates), at the same updates;
- ``valid/loss``, ``valid/nll``, ``valid/ppl`` and ``valid/bleu`` (when ``train.bleu_sentences`` > 0): every validation.

A resumed run appends to the same folder and hides what the interrupted run wrote after its checkpoint (TensorBoard's
``purge_step``), so the curves have no doubled stretch. Needs the ``tensorboard`` package: ``pip install
"mma_nmt[tensorboard]"``."""

from __future__ import annotations

from pathlib import Path

_TRAIN_SCALARS = {"loss": "train/loss", "nll": "train/nll", "ppl": "train/ppl", "lr": "train/lr",
                  "tokens_per_s": "train/tokens_per_s"}
_VALID_SCALARS = {"valid_loss": "valid/loss", "valid_nll": "valid/nll", "valid_ppl": "valid/ppl",
                  "valid_bleu": "valid/bleu"}


def _summary_writer_class():
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as error:
        raise ImportError('train.loggers = ["tensorboard"] needs the tensorboard package, which is not installed: '
                          f'pip install "mma_nmt[tensorboard]" (or pip install tensorboard) ({error})') from None
    return SummaryWriter


class TensorBoardLogger:
    """A trainer hook writing the trainer's latest ``train`` log entry and validation to TensorBoard event files in
    ``log_dir``. The folder is created at the first write, while the trainer holds the run directory's lock."""

    def __init__(self, log_dir: str | Path):
        self.log_dir = Path(log_dir)
        self._writer_class = _summary_writer_class()  # a missing package fails here, before training starts
        self._writer = None
        self._written = {"train": None, "valid": None}  # step of the last entry of each kind written
        self._purge_step: int | None = None  # the first update of this process: points from there on are its own

    def __call__(self, trainer) -> None:
        if self._purge_step is None:
            self._purge_step = trainer.step  # called after each update: the first one this process made
        self._write_new(trainer)

    def close(self, trainer) -> None:
        if self._purge_step is None:  # no update made (a finished run resumed): keep every earlier point
            self._purge_step = trainer.step + 1
        self._write_new(trainer)
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def _write_new(self, trainer) -> None:
        for kind, entry, tags in (("train", trainer.last_train_log, _TRAIN_SCALARS),
                                  ("valid", trainer.last_validation, _VALID_SCALARS)):
            if entry is None or entry[0] == self._written[kind]:
                continue
            step, values = entry
            writer = self._open()
            for key, tag in tags.items():
                if key in values:
                    writer.add_scalar(tag, float(values[key]), global_step=step)
            self._written[kind] = step
        if self._writer is not None:
            self._writer.flush()  # live: TensorBoard shows each point as soon as it is logged

    def _open(self):
        if self._writer is None:
            # TensorBoard hides the points of earlier event files in this folder from purge_step on: those an
            # interrupted run wrote after the checkpoint this run resumed from (or all, when it started over)
            self._writer = self._writer_class(log_dir=str(self.log_dir), purge_step=self._purge_step)
        return self._writer
