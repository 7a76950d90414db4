"""``mma-nmt`` / ``python -m mma_nmt``: prepare | train | translate | evaluate | average | experiment | demo.

Every command reads a run config (``--config file.toml|.yaml|.json``) and dotted overrides
(``--set model.encoder.attention=mma --set train.max_steps=1000``)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

DEMO_CONFIG = Path(__file__).resolve().parents[2] / "configs" / "tiny_mma_multi30k.toml"


def _run_config(args):
    from mma_nmt.training.config import load_run_config

    return load_run_config(args.config, args.set)


def _add_config(parser: argparse.ArgumentParser, default=None) -> None:
    parser.add_argument("--config", default=default, help="run config file (.toml, .yaml, .json)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config value by dotted key, e.g. model.encoder.attention=mma (repeatable)")


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mma-nmt", description=__doc__.split("\n")[0])
    parser.add_argument("--debug", action="store_true",
                        help="on an error, show the full Python traceback (anywhere on the command line)")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_config(sub.add_parser("prepare", help="prepare a corpus (SentencePiece + binarised splits)"))
    p = sub.add_parser("train", help="train a model (torchrun for several processes)")
    _add_config(p)
    p.add_argument("--overwrite", action="store_true",
                   help="start over in train.save_dir, deleting its checkpoints (train.resume=false, overwrite=true)")
    p = sub.add_parser("translate", help="translate a prepared split with greedy/beam search")
    _add_config(p)
    p.add_argument("--checkpoint", help="default: <train.save_dir>/best.pt, else last.pt")
    p.add_argument("--split", help="default: eval.split")
    p.add_argument("--input", help="raw source sentences, one per line, instead of a prepared split")
    p.add_argument("--output", help="default: <train.save_dir>/translations/<split>.hyp.txt")
    p = sub.add_parser("evaluate", help="BLEU/chrF/TER, BLEU by length, paired bootstrap")
    _add_config(p)
    p.add_argument("--hyp", help="default: <train.save_dir>/translations/<split>.hyp.txt")
    p.add_argument("--ref", help="default: the prepared split's target text")
    p.add_argument("--baseline", help="baseline system output for paired bootstrap resampling")
    p.add_argument("--split")
    p.add_argument("--bootstrap-samples", type=_positive_int, default=1000)
    p = sub.add_parser("average", help="average the weights of several checkpoints")
    p.add_argument("inputs", nargs="+")
    p.add_argument("--output", required=True)
    p = sub.add_parser("experiment", help="reproduce a paper's tables (experiments/<paper>/experiment.toml)")
    p.add_argument("paper", help="a folder name under experiments/ (mma, lstm_multihead, mlmha, multihop, gmm) or a path")
    p.add_argument("--table", action="append", help="table name (repeatable); default: every table of the paper")
    p.add_argument("--scale", default="mini", choices=["full", "mini", "smoke"])
    p.add_argument("--jobs", type=int, default=1, help="runs trained side by side (each in its own process)")
    p.add_argument("--runs-dir", default="runs/experiments", help="where runs live (shared by all papers)")
    p.add_argument("--results-dir", help="default: experiments/<paper>/results/<scale>")
    p.add_argument("--bootstrap-samples", type=_positive_int, default=1000)
    p = sub.add_parser("demo", help="prepare Multi30k De-En, train the tiny MMA Transformer, translate, score")
    _add_config(p, default=str(DEMO_CONFIG))
    p.add_argument("--minutes", type=float, default=3.0, help="training time budget")
    return parser


def demo(args) -> dict:
    from mma_nmt.cli import commands

    args.set = [f"train.max_minutes={args.minutes}"] + args.set
    run = _run_config(args)
    started = time.monotonic()
    print(f"[demo] preparing {run.data.get('corpus')} into {commands.prepare_data(run)}", flush=True)
    commands.train(run)
    print(f"[demo] trained; translating {run.eval.split} with beam {run.decode.beam_size}", flush=True)
    hyp = commands.translate(run)
    scores = commands.evaluate(run, hypotheses=str(hyp))
    scores["minutes_total"] = round((time.monotonic() - started) / 60.0, 2)
    scores["translations"] = str(hyp)
    scores["attention_maps"] = str(hyp.parent / "attention")
    commands.print_json(scores)
    print(f"[demo] BLEU {scores['bleu']:.2f} ({scores['bleu_signature']})", flush=True)
    return scores


def main(argv: list[str] | None = None) -> int:
    """Runs one command. A failure prints ``mma-nmt: error: <message>`` and returns 2 (argparse's status for a bad
    command line); ``--debug`` raises it instead, with its traceback."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    args = build_parser().parse_args([arg for arg in argv if arg != "--debug"])
    try:
        return _run(args)
    except Exception as error:
        if debug:
            raise
        print(f"mma-nmt: error: {_message(error)}", file=sys.stderr)
        return 2


def _message(error: Exception) -> str:
    text = str(error.args[0]) if isinstance(error, KeyError) and error.args else str(error)  # KeyError quotes it
    return text or type(error).__name__


def _run(args) -> int:
    from mma_nmt.cli import commands

    if args.command == "prepare":
        print(commands.prepare_data(_run_config(args)))
    elif args.command == "train":
        if args.overwrite:
            args.set = args.set + ["train.resume=false", "train.overwrite=true"]
        commands.print_json(commands.train(_run_config(args)))
    elif args.command == "translate":
        print(commands.translate(_run_config(args), checkpoint=args.checkpoint, output=args.output,
                                 split=args.split, input_file=args.input))
    elif args.command == "evaluate":
        commands.print_json(commands.evaluate(_run_config(args), hypotheses=args.hyp, references=args.ref,
                                              baseline=args.baseline, split=args.split,
                                              bootstrap_samples=args.bootstrap_samples))
    elif args.command == "average":
        print(commands.average(args.inputs, args.output))
    elif args.command == "experiment":
        from mma_nmt.experiments.command import run_experiment

        run_experiment(args.paper, tables=args.table, scale=args.scale, jobs=args.jobs, runs_dir=args.runs_dir,
                       results_dir=args.results_dir, bootstrap_samples=args.bootstrap_samples)
    elif args.command == "demo":
        demo(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
