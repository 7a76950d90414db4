"""Training speed against sentence length: from which length fused attention pays end to end.

At the suite's training shapes (Multi30k, about 30 tokens a sentence) the attention computation is 6-8% of a
transformer_iwslt_small step (``benchmarks/results/end_to_end_profile.md``). So fused attention taking no time at all
would make a step at most 1.07-1.08x faster, and issue 8's "training >= 1.2x faster than the reference path" cannot be
met there. Per token, attention costs grow with the sentence length L; the projections, the FFN and the output layer
do not. This script times one training step with fused and with reference attention at a fixed number of tokens per
batch and growing L, to show where the ratio crosses 1.2x.

Batches are synthetic: ``tokens // L`` sentences of random ids (vocabulary 8000), source and target lengths drawn in
[3L/4, L]. Speed does not depend on the ids. Each step is the suite's (``section_end_to_end.train_step_fn``: forward,
label-smoothed loss, backward, Adam), and the two paths take turns step by step (medians).

    python -m benchmarks.bench_training_lengths [--lengths 32 64 128 256] [--tokens 2048] [--models MMA GMM]
                                                [--preset transformer_iwslt_small] [--repeat 3] [--threads N]
"""

from __future__ import annotations

import argparse
from types import SimpleNamespace

import torch

from benchmarks.section_end_to_end import ATTENTION, config_for_vocab, train_step_fn
from benchmarks.timing import markdown_table, time_interleaved
from mma_nmt.data.batch import Batch, collate
from mma_nmt.data.tokenizer import PAD_ID, UNK_ID

VOCAB = 8000


def synthetic_batch(sentences: int, length: int, seed: int = 0) -> Batch:
    """``sentences`` random source/target pairs with lengths in [3 * length / 4, length] (target without BOS/EOS
    ``length - 1``, so that tgt_in and tgt_out are ``length`` wide), collated as the trainer's batches are."""
    g = torch.Generator().manual_seed(seed)
    low = max(1, 3 * length // 4)

    def draw(longest: int) -> list[torch.Tensor]:
        sizes = torch.randint(min(low, longest), longest + 1, (sentences,), generator=g).tolist()
        return [torch.randint(UNK_ID + 1, VOCAB, (n,), generator=g) for n in sizes]

    pairs = SimpleNamespace(src=draw(length), tgt=draw(length - 1))  # what collate reads of a dataset
    return collate(pairs, range(sentences))


HEADER = ["model", "L", "sentences", "target tokens", "fused tok/s", "reference tok/s", "fused / reference"]


def rows_for(preset_name: str, attention: str, lengths, tokens: int, repeat: int) -> list[list]:
    rows = []
    for length in lengths:
        batch = synthetic_batch(max(1, tokens // length), length)
        configs = [config_for_vocab(preset_name, attention, impl, src_vocab=VOCAB, tgt_vocab=VOCAB, pad_id=PAD_ID)
                   for impl in ("fused", "reference")]
        fused, reference = time_interleaved([train_step_fn(c, batch) for c in configs], repeat=repeat, warmup=1,
                                            min_seconds=0)
        rows.append([f"{preset_name}, {attention}", length, len(batch), batch.num_tokens, batch.num_tokens / fused,
                     batch.num_tokens / reference, reference / fused])
        print(markdown_table(HEADER, rows[-1:]).splitlines()[-1], flush=True)
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[32, 64, 128, 256])
    parser.add_argument("--tokens", type=int, default=2048, help="source tokens per batch, at most (default: 2048)")
    parser.add_argument("--models", nargs="+", choices=sorted(ATTENTION), default=sorted(ATTENTION))
    parser.add_argument("--preset", default="transformer_iwslt_small")
    parser.add_argument("--repeat", type=int, default=3, help="timed steps per path and length (default: 3)")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's choice)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch threads: {torch.get_num_threads()}; about {args.tokens} source tokens a batch\n")
    print("\n".join(markdown_table(HEADER, []).splitlines()[:2]), flush=True)
    rows = []
    for attention in args.models:
        rows += rows_for(args.preset, attention, args.lengths, args.tokens, args.repeat)
    print()
    print(markdown_table(HEADER, rows))


if __name__ == "__main__":
    main()
