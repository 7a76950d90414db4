"""CUDA section "training": one training step (forward, label-smoothed loss, backward, Adam) of a whole model on one
fixed batch of random sentences, in float32 and under autocast to float16 and bfloat16, fused operators against a
baseline: Transformers with MMA encoder heads (GLFB) or all-global heads against the same model built from
``nn.MultiheadAttention`` (``implementation="torch"``; issue 48), and the GMM Transformer and the 4-head LSTM against
their plain-PyTorch reference models (``implementation="reference"``, the same parameters; issue 49). In float32
the fused model is also timed with ``MMA_NMT_CUDA_KERNELS=composition``: the compositions of PyTorch's kernels, the
float32 default until 2026-12-02 (``common/cuda_dispatch.h``), against the hand-written kernels that replaced them
without a measurement; and under ``train.deterministic`` (torch's deterministic algorithms: attention's tiled backward
instead of its atomic warp-per-row one at these sizes), the price of bit-identical GPU runs.

Alone, with both models of each pair compiled as ``train.compile`` compiles them (``reduce-overhead``: the forward and
backward replayed as CUDA graphs, issue 48's "also under CUDA graphs"):

    python -m benchmarks.cuda_training [--quick] [--compile reduce-overhead] [--precision "autocast bfloat16"]
        [--model "transformer_iwslt_small MMA"]"""

from __future__ import annotations

import argparse
import contextlib
from dataclasses import dataclass

import torch

from benchmarks.cuda_nmt_sizes import in_mode
from benchmarks.profiles import TIMING
from benchmarks.report import Section, Table
from benchmarks.section_end_to_end import config_for_vocab
from benchmarks.timing import markdown_table, time_interleaved
from mma_nmt.data.batch import Batch, pad_sequences
from mma_nmt.models import build_model, preset
from mma_nmt.training.determinism import deterministic_algorithms
from mma_nmt.training.loss import label_smoothed_cross_entropy
from mma_nmt.training.trainer import compiled, host_fields

VOCAB, PAD, BOS, EOS = 8000, 0, 1, 2
PRECISIONS = {"float32": None, "autocast float16": torch.float16, "autocast bfloat16": torch.bfloat16}


@dataclass(frozen=True)
class StepCase:
    """One model at one batch size. ``attention``: a key of ``section_end_to_end.ATTENTION`` ("MMA", "GMM"), or None
    for the preset's own attention (all-global heads; the LSTM's Luong heads). ``baseline``: the implementation the
    fused model is timed against."""

    preset: str
    attention: str | None
    sentences: int
    length: int
    baseline: str  # "torch" (nn.MultiheadAttention) or "reference"

    @property
    def label(self) -> str:
        return f"{self.preset} {self.attention or 'own attention'}"

    def config(self, implementation: str):
        if self.attention is None:
            return preset(self.preset, src_vocab_size=VOCAB, tgt_vocab_size=VOCAB, pad_id=PAD,
                          implementation=implementation)
        return config_for_vocab(self.preset, self.attention, implementation, src_vocab=VOCAB, tgt_vocab=VOCAB,
                                pad_id=PAD)


@dataclass(frozen=True)
class Sizes:
    models: tuple[StepCase, ...]
    turns: int


_QUICK = (StepCase("transformer_iwslt_small", "MMA", 64, 64, "torch"),
          StepCase("transformer_iwslt_small", None, 64, 64, "torch"),
          StepCase("transformer_iwslt_small", "GMM", 64, 64, "reference"),
          StepCase("lstm_iwslt15", None, 64, 32, "reference"))
SIZES = {"full": Sizes((StepCase("transformer_tiny", "MMA", 128, 32, "torch"), *_QUICK,
                        StepCase("transformer_iwslt_small", "MMA", 32, 256, "torch")), turns=7),
         "quick": Sizes(_QUICK, turns=3),
         "tiny": Sizes((StepCase("transformer_tiny", "MMA", 2, 8, "torch"),
                        StepCase("transformer_tiny", "GMM", 2, 8, "reference"),
                        StepCase("lstm_tiny", None, 2, 8, "reference")), turns=1)}


def random_batch(sentences: int, length: int, *, seed: int = 0, device: str = "cuda", vocab: int = VOCAB) -> Batch:
    """Sentences of random tokens of a ``vocab``-word vocabulary, lengths drawn in [length/2, length], on ``device``."""
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(max(1, length // 2), length + 1, (2, sentences), generator=gen)
    src = [torch.randint(3, vocab, (int(n),), generator=gen) for n in lengths[0]]
    tgt = [torch.randint(3, vocab, (int(n),), generator=gen) for n in lengths[1]]
    src_ids, src_lengths = pad_sequences(src, pad_id=PAD)
    tgt_in, tgt_lengths = pad_sequences(tgt, prefix=BOS, pad_id=PAD)
    tgt_out, _ = pad_sequences(tgt, suffix=EOS, pad_id=PAD)
    return Batch(src_ids, src_lengths, tgt_in, tgt_out, tgt_lengths, torch.arange(sentences)).to(device)


def train_step_fn(config, batch: Batch, precision: torch.dtype | None, compile_mode: bool | str = False):
    """One step of a fresh model on ``batch``'s device (as ``section_end_to_end.train_step_fn``), the model compiled as
    ``train.compile = compile_mode`` compiles it (false: eager)."""
    torch.manual_seed(0)
    model = compiled(build_model(config).to(batch.src.device).train(), compile_mode)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    tokens = batch.num_tokens  # read once, outside the timed step: as in the trainer, the step reads no device value
    src_lengths = batch.src_lengths.cpu() if host_fields(model) else batch.src_lengths  # where the trainer keeps them

    def step():
        optimizer.zero_grad(set_to_none=True)
        autocast = (torch.autocast(batch.src.device.type, precision) if precision is not None
                    else contextlib.nullcontext())
        with autocast:
            logits = model(batch.src, src_lengths, batch.tgt_in)  # (B, T, V): padding carries no loss
            loss, _ = label_smoothed_cross_entropy(logits.float(), batch.tgt_out, epsilon=0.1, ignore_index=PAD)
        (loss / tokens).backward()
        optimizer.step()

    return step


def deterministic(step):
    """``step`` under torch's deterministic algorithms, as ``train.deterministic`` trains (the backward included)."""
    def wrapped():
        with deterministic_algorithms(True):
            step()
    return wrapped


def run(profile: str, *, compile_mode: bool | str = False, precisions: tuple[str, ...] | None = None,
        models: tuple[str, ...] | None = None) -> Section:
    """The section: every case of ``profile`` (or those whose label is in ``models``) in each of ``precisions``
    (names of PRECISIONS; default all), both models compiled with ``compile_mode`` (default eager; compiled runs warm
    up for 3 steps: compilation and, under reduce-overhead, the CUDA-graph recording)."""
    sizes = SIZES[profile]
    warmup = 3 if compile_mode else 1
    timing = {**TIMING[profile].kwargs(), "min_seconds": 0.0, "warmup": warmup, "repeat": sizes.turns}
    section = Section("training", "c. Training step: fused vs the nn.MultiheadAttention or reference model",
                      __doc__)
    compiled_as = f" compiled {compile_mode}" if compile_mode else ""
    rows = []
    for case in (c for c in sizes.models if models is None or c.label in models):
        batch = random_batch(case.sentences, case.length)
        configs = [case.config(implementation) for implementation in ("fused", case.baseline)]
        for name in precisions or tuple(PRECISIONS):
            steps = [train_step_fn(c, batch, PRECISIONS[name], compile_mode) for c in configs]
            if PRECISIONS[name] is None:  # float32: the fused model on the compositions, and deterministic, too
                steps.append(in_mode("composition", train_step_fn(configs[0], batch, None, compile_mode)))
                steps.append(deterministic(train_step_fn(configs[0], batch, None, compile_mode)))
            fused, baseline, *float32_only = time_interleaved(steps, synchronize=torch.cuda.synchronize, **timing)
            label = name + compiled_as
            where = f"{case.label} {case.sentences}x{case.length} {label}"
            rows.append([case.label, f"{case.sentences} x {case.length}", label, case.baseline,
                         batch.num_tokens / fused, batch.num_tokens / baseline, baseline / fused,
                         *(batch.num_tokens / t for t in float32_only)] + ["-"] * (2 - len(float32_only)))
            target = "cuda_train_vs_torch" if case.baseline == "torch" else "cuda_train_vs_reference"
            section.figure(target, baseline / fused, where)
    section.tables.append(Table("Training tokens/s", ["model", "batch (sentences x max len)", "precision", "baseline",
                                                      "fused tok/s", "baseline tok/s", "fused / baseline",
                                                      "fused on compositions tok/s",
                                                      "fused deterministic tok/s"], rows))
    return section


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description="the CUDA training section alone, optionally compiled")
    parser.add_argument("--quick", action="store_true", help="the quick sizes (default: full)")
    parser.add_argument("--compile", default=False, dest="compile_mode", metavar="MODE",
                        help='compile both models as train.compile does, e.g. "reduce-overhead" (CUDA graphs)')
    parser.add_argument("--precision", action="append", choices=list(PRECISIONS),
                        help="precisions to time (repeatable; default all)")
    parser.add_argument("--model", action="append", choices=sorted({c.label for s in SIZES.values() for c in s.models}),
                        help="models to time, by label (repeatable; default all)")
    args = parser.parse_args(argv)
    from benchmarks.cuda_suite import gpu_info, require_cuda
    require_cuda()
    print(f"GPU: {gpu_info()}\n")
    section = run("quick" if args.quick else "full", compile_mode=args.compile_mode,
                  precisions=tuple(args.precision) if args.precision else None,
                  models=tuple(args.model) if args.model else None)
    for table in section.tables:
        print(f"### {table.title}\n")
        print(markdown_table(table.columns, table.rows))


if __name__ == "__main__":
    main()
