"""What ``decode.compile`` buys the LSTM's beam search on a GPU: the eager search against the search on the compiled
decoder step (``"reduce-overhead"``: one CUDA graph per batch shape, replayed at every output position).

An LSTM of a preset (random weights, dropout off; ``lstm_iwslt15`` by default: dh 1024, 4 heads, 2 layers) translates
``--sentences`` random sources of ``--src-len`` tokens (lengths in [S/2, S]) in batches of ``--batch-size``, each search
running to its length limit (``--max-len`` positions: random weights rarely end early). The compiled search runs
twice: first pass (compilation and recording), then replays. Each pass is timed whole, synchronised. Reported: the
seconds and sentences per second of each, and how many sentences' best hypotheses equal the eager search's (in half
precision the compiled code may round differently, so a few may not).

    python -m benchmarks.cuda_search [--dtype bfloat16] [--beam 5] [--sentences 512] [--batch-size 64]

``--device cpu --compile false`` runs the same loop on the CPU (the tests' smoke run); the numbers mean something on
a GPU only.
"""

from __future__ import annotations

import argparse
import time

import torch

from benchmarks.timing import markdown_table
from mma_nmt.decoding.search import SearchConfig, SpecialIds
from mma_nmt.decoding.translate import translate_ids_nbest
from mma_nmt.models import build_model, preset

VOCAB = 1000
COLUMNS = ["search", "pass", "s", "sentences/s", "eager / this", "best hypothesis as eager's"]
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def sources(count: int, src_len: int, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(max(1, src_len // 2), src_len + 1, (count,), generator=g)
    return [torch.randint(4, VOCAB, (int(n),), generator=g) for n in lengths]


def timed_search(model, texts, config: SearchConfig, device: str):
    """(seconds, best hypotheses' tokens) of one search over ``texts``, synchronised."""
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    start = time.perf_counter()
    found = translate_ids_nbest(model, texts, config, SpecialIds(), device=device)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - start, [hyps[0].tokens for hyps in found]


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="lstm_iwslt15")
    parser.add_argument("--dtype", default="bfloat16", choices=list(DTYPES))
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--sentences", type=int, default=512)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--src-len", type=int, default=30)
    parser.add_argument("--max-len", type=int, default=40, help="output positions per search (EOS included)")
    parser.add_argument("--compile", default="reduce-overhead", dest="compile_mode",
                        help='a torch.compile mode, or "true"; "false" times the eager search twice (smoke runs)')
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args(argv)
    mode = {"true": True, "false": False}.get(args.compile_mode, args.compile_mode)
    torch.manual_seed(0)
    model = build_model(preset(args.preset, src_vocab_size=VOCAB, tgt_vocab_size=VOCAB, dropout=0.0))
    model = model.to(device=args.device, dtype=DTYPES[args.dtype])
    texts = sources(args.sentences, args.src_len)
    config = SearchConfig(beam_size=args.beam, batch_size=args.batch_size, max_len_a=0.0, max_len_b=args.max_len)
    timed_search(model, texts[:args.batch_size], config, args.device)  # warm-up: cuDNN, the allocator
    eager_s, eager = timed_search(model, texts, config, args.device)
    rows = [["eager", "-", f"{eager_s:.2f}", f"{len(texts) / eager_s:.1f}", "1.00", "-"]]
    config.compile = mode
    for name in ("first", "second"):
        seconds, found = timed_search(model, texts, config, args.device)
        same = sum(a == b for a, b in zip(found, eager, strict=True))
        rows.append([f"decode.compile={args.compile_mode}", name, f"{seconds:.2f}", f"{len(texts) / seconds:.1f}",
                     f"{eager_s / seconds:.2f}", f"{same} / {len(texts)}"])
    device_name = torch.cuda.get_device_name() if args.device.startswith("cuda") else "CPU"
    report = (f"# Beam search, eager against decode.compile ({device_name}, torch {torch.__version__})\n\n"
              f"{args.preset} (random weights), {args.dtype}, beam {args.beam}, {len(texts)} sources of "
              f"{args.src_len // 2}-{args.src_len} tokens in batches of {args.batch_size}, {args.max_len} output "
              f"positions\n\n" + markdown_table(COLUMNS, rows))
    print(report)
    return report


if __name__ == "__main__":
    main()
