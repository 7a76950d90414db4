"""``mma-nmt translate`` on raw text: ``--model FOLDER`` (an export or a run directory), ``--input -`` (stdin,
streamed), ``--nbest N``, ``--preprocessed``. A prepared split is translated by ``cli.main._translate``."""

from __future__ import annotations

import sys
from pathlib import Path


def _decode_overrides(overrides: list[str]) -> dict:
    """``--set decode.KEY=VALUE`` as ``{KEY: value}``; other sections are refused (the model folder fixes them)."""
    from mma_nmt.config_io import parse_value

    decode = {}
    for item in overrides:
        key, _, value = item.partition("=")
        if not key.startswith("decode.") or not _:
            raise ValueError(f"--set {item}: with --model only decode.KEY=VALUE settings apply (the model folder "
                             f"holds the rest)")
        decode[key[len("decode."):]] = parse_value(value)
    return decode


def _translator(args):
    """(translator, search config, default output path or None for stdout)."""
    import torch

    from mma_nmt.translator import Translator

    if args.model:
        if args.config:
            raise ValueError("--model and --config both name a model: give one (--model reads the folder's own config)")
        translator = Translator.from_pretrained(args.model, checkpoint=args.checkpoint)
        return translator, translator.search_config(**_decode_overrides(args.set)), None
    from mma_nmt import pipeline
    from mma_nmt.run_directory import parts_of_run
    from mma_nmt.training.config import load_run_config

    run = load_run_config(args.config, args.set)
    if run.train.threads:
        torch.set_num_threads(run.train.threads)
    device = torch.device("cuda" if torch.cuda.is_available() and run.train.device != "cpu" else "cpu")
    parts = parts_of_run(run, checkpoint=args.checkpoint or pipeline.default_checkpoint(run), device=device)
    default = None if args.input == "-" else Path(run.train.save_dir) / "translations" / (Path(args.input).name +
                                                                                          ".hyp.txt")
    return Translator(parts, device=device), run.decode, default


def translate_text(args) -> dict:
    from mma_nmt.cli import summary
    from mma_nmt.translate_text import translate_file, translate_stream

    if not args.input:
        raise ValueError("--model, --nbest and --preprocessed translate raw text: give --input FILE, or --input - for "
                         "stdin")
    if args.split:
        raise ValueError("--split translates a prepared split; --input gives raw text: use one of them")
    translator, config, default = _translator(args)
    say = lambda text: print(text, file=sys.stderr, flush=True)  # noqa: E731
    lost = translator.processing.output.not_restored
    if lost:
        say(f"note: translations stay as the corpus's {translator.processing.output.lang} text was: "
            f"{', '.join(lost)}")
    options = {"config": config, "nbest": args.nbest, "preprocessed": args.preprocessed}
    output = Path(args.output) if args.output else default
    if args.input != "-" and output is not None:
        out = translate_file(translator, args.input, output, progress=True, say=say, **options)
        count = sum(1 for _ in out.open(encoding="utf-8"))
        result = {"translations": str(out), "lines": count}
        summary.report(result, [f"wrote {count} lines"] + summary.files_lines({"translations": out}), json_path=None,
                       as_json=args.json)
        return result
    source = sys.stdin if args.input == "-" else open(args.input, encoding="utf-8")
    sink = open(output, "w", encoding="utf-8") if output is not None else sys.stdout
    try:
        interactive = args.input == "-" and sys.stdin.isatty()
        count = translate_stream(translator, source, sink, batch_size=1 if interactive else None, say=say, **options)
    finally:
        for handle, standard in ((source, sys.stdin), (sink, sys.stdout)):
            if handle is not standard:
                handle.close()
    say(f"translated {count} lines" + (f" into {output}" if output is not None else ""))
    return {"translations": str(output) if output else "-", "lines": count}
