"""The beam search's bookkeeping alone: the tensor walk on the device (``mma_nmt.decoding.beam``) against the walk it
replaced, one sentence and one candidate at a time on the host (``mma_nmt.reference.beam_search``).

A stand-in model hands out the same random logits (B K, 1, V) at every step (EOS made unlikely, so that every
sentence runs to its length limit), so a search's time is its own work: the constraints, the top 2K candidates, the
walk, the reorder. On a GPU that work is host time between the decoder's steps, which the compiled step
(``decode.compile``) cannot hide; here it is the CPU's, where the constraints and the top-2K over K x V candidates,
the same in both, weigh more as the vocabulary grows. Rounds alternate the two searches (``time_interleaved``); the
table gives the median milliseconds per output position and the ratio. Both find the same hypotheses (checked).

    python -m benchmarks.beam_bookkeeping [--batches 16 64] [--vocabs 1000 8000] [--beam 5] [--positions 30]
        [--device cpu]
"""

from __future__ import annotations

import argparse

import torch

from benchmarks.machine import cpu_model
from benchmarks.timing import markdown_table, time_interleaved
from mma_nmt.decoding.beam import beam_search
from mma_nmt.decoding.search import SearchConfig, SpecialIds
from mma_nmt.models import EncoderOut
from mma_nmt.reference.beam_search import beam_search_reference

COLUMNS = ["sentences", "beam", "vocabulary", "positions", "host walk ms / position",
           "tensor walk ms / position", "host / tensor"]


class FixedLogits(torch.nn.Module):
    """The same logits (rows, 1, V) for every step, drawn once; EOS 8 below the rest's typical value."""

    def __init__(self, rows: int, vocab: int, device: str):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.logits = torch.randn(rows, 1, vocab, generator=g).to(device)
        self.logits[..., SpecialIds().eos] = -8.0

    def encode(self, src, src_lengths, need_weights=False):
        return EncoderOut(out=src.unsqueeze(-1).float(), lengths=src_lengths)

    def decode(self, prev_tokens, encoder_out, incremental_state=None, need_weights=False):
        return self.logits, None


def measure(batch: int, beam: int, vocab: int, positions: int, device: str, repeat: int) -> list:
    model = FixedLogits(batch * beam, vocab, device)
    src = torch.ones(batch, 8, dtype=torch.long, device=device)
    lengths = torch.full((batch,), 8, device=device)
    config = SearchConfig(beam_size=beam, max_len_a=0.0, max_len_b=positions)
    found = [search(model, src, lengths, config) for search in (beam_search_reference, beam_search)]
    assert [[h.tokens for h in hyps] for hyps in found[0]] == [[h.tokens for h in hyps] for hyps in found[1]]
    synchronize = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    host, tensor = time_interleaved([lambda: beam_search_reference(model, src, lengths, config),
                                     lambda: beam_search(model, src, lengths, config)],
                                    repeat=repeat, min_seconds=0.2, synchronize=synchronize)
    return [batch, beam, vocab, positions, f"{host / positions * 1e3:.3f}", f"{tensor / positions * 1e3:.3f}",
            f"{host / tensor:.2f}"]


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--vocabs", type=int, nargs="+", default=[1000, 8000])
    parser.add_argument("--positions", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    rows = [measure(batch, args.beam, vocab, args.positions, args.device, args.repeat)
            for vocab in args.vocabs for batch in args.batches]
    where = (torch.cuda.get_device_name() if args.device.startswith("cuda")
             else f"{cpu_model()}, {args.threads} thread(s)")
    report = (f"# Beam-search bookkeeping per output position ({where}, torch {torch.__version__})\n\n"
              "Median of interleaved rounds; a stand-in model with fixed logits, so the time is the search's own.\n\n"
              + markdown_table(COLUMNS, rows))
    print(report)
    return report


if __name__ == "__main__":
    main()
