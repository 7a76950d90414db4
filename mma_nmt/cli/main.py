"""``mma-nmt`` / ``python -m mma_nmt``: prepare | train | translate | evaluate | average | export | experiment | demo.

Every command reads a run config (``--config file.toml|.yaml|.json``) and dotted overrides
(``--set model.encoder.attention=mma --set train.max_steps=1000``). This module only parses the command line, calls
``mma_nmt.pipeline`` (or ``mma_nmt.experiments``) and prints the summaries of ``summary``."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

DESCRIPTION = "Neural machine translation with fused attention operators: data, training, decoding, evaluation."
DEMO_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "tiny_mma_multi30k.toml"  # package data
TINY = "configs/tiny_mma_multi30k.toml"

# What mma-nmt experiment never does to a published table (mma_nmt.experiments.report.write_table and lost_numbers
# enforce it); here, not there, so that building the parser, on every command, imports no experiments module.
TABLE_POLICY = """\
A table is never rewritten with fewer seeds, runs or significance daggers than it publishes:
when a seed's run has no record any more (a run failed or is not finished, its record was
removed, or its config changed), or a seed's difference to the baseline would disappear or
lose a dagger (†† to †, or to n.s.), the table is kept as it is, the command names each cell,
seed and number it would lose, and exits non-zero. Finish or restore those runs, or pass
--allow-fewer to publish the table with less. Adding runs and seeds is always allowed."""

# One example per command, shown at the end of its --help.
EXAMPLES = {
    "prepare": f"mma-nmt prepare --config {TINY}",
    "train": f"mma-nmt train --config {TINY} --set train.max_minutes=3\n"
             f"  torchrun --standalone --nproc_per_node=2 -m mma_nmt train --config {TINY}   # data parallel",
    "translate": f"mma-nmt translate --config {TINY}                # the test split, with scores\n"
                 f"  mma-nmt translate --config {TINY} --input my_sentences.de --output my_sentences.en\n"
                 f"  echo 'Ein Hund läuft.' | mma-nmt translate --model exported/ --input - --nbest 3",
    "evaluate": f"mma-nmt evaluate --config {TINY} --hyp system.txt --baseline baseline.txt",
    "average": "mma-nmt average runs/big/step_*.pt --output runs/big/averaged.pt",
    "export": "mma-nmt export runs/train exported/   # then: mma-nmt translate --model exported/ --input -",
    "experiment": "mma-nmt experiment mma --table main --scale mini --jobs 2   (--from-records: rebuild, no training)",
    "demo": "mma-nmt demo --minutes 3",
}


def _run_config(args):
    from mma_nmt.training.config import load_run_config

    return load_run_config(args.config, args.set)


def _add_config(parser: argparse.ArgumentParser, default=None) -> None:
    parser.add_argument("--config", default=default, help="run config file (.toml, .yaml, .json)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config value by dotted key, e.g. model.encoder.attention=mma (repeatable)")


def _add_json(parser: argparse.ArgumentParser, where: str) -> None:
    parser.add_argument("--json", action="store_true",
                        help=f"print the result as JSON instead of the summary (it is written to {where} either way)")


def _command(sub, name: str, help: str) -> argparse.ArgumentParser:
    return sub.add_parser(name, help=help, description=help[0].upper() + help[1:] + ".",
                          epilog="example:\n  " + EXAMPLES[name], formatter_class=argparse.RawDescriptionHelpFormatter)


def _version() -> str:
    import torch

    import mma_nmt

    info = mma_nmt.build_info()
    if not info["extension"]:
        return f"mma-nmt {mma_nmt.__version__} (torch {torch.__version__}, {info['error']}: no fused operators)"
    return (f"mma-nmt {mma_nmt.__version__} (torch {torch.__version__}, CPU kernels {info['cpu_kernel']}, "
            f"CUDA kernels {'yes' if info['cuda'] else 'no'})")


class _VersionAction(argparse.Action):
    """``--version``: computed only when asked for (it reads the extension's build info)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        print(_version())
        parser.exit()


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mma-nmt", description=DESCRIPTION,
                                     epilog="mma-nmt COMMAND --help shows a command's options and an example.")
    parser.add_argument("--version", action=_VersionAction, help="print the version and how the extension was built")
    parser.add_argument("--debug", action="store_true",
                        help="on an error, show the full Python traceback (anywhere on the command line)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_config(_command(sub, "prepare", "prepare a corpus (SentencePiece + binarised splits)"))
    p = _command(sub, "train", "train a model (torchrun for several processes)")
    _add_config(p)
    p.add_argument("--overwrite", action="store_true",
                   help="start over in train.save_dir, deleting its checkpoints (train.resume=false, overwrite=true)")
    _add_json(p, "<train.save_dir>/log.jsonl")
    p = _command(sub, "translate", "translate a prepared split (and score it) or a file of sentences")
    _add_config(p)
    p.add_argument("--model", help="an exported model (mma-nmt export) or a run directory, instead of --config; "
                                   "translates --input (--set decode.KEY=VALUE still applies)")
    p.add_argument("--checkpoint", help="default: <train.save_dir>/best.pt, else last.pt")
    p.add_argument("--split", help="default: eval.split")
    p.add_argument("--input", help="raw source sentences, one per line, instead of a prepared split ('-': stdin, "
                                   "each batch written and flushed as soon as it is translated, one line at a time "
                                   "from a terminal); they get the corpus's word-level preprocessing (e.g. Moses "
                                   "tokenisation, lowercasing) before SentencePiece and the outputs its "
                                   "postprocessing (detokenisation); an empty or whitespace-only line gives an empty "
                                   "output line (line count kept, the number of such lines reported on stderr)")
    p.add_argument("--preprocessed", action="store_true",
                   help="the --input text is already word-level preprocessed as the corpus: SentencePiece only")
    p.add_argument("--nbest", type=_positive_int,
                   help="write the N best translations per input line as 'INDEX ||| TRANSLATION ||| SCORE' (0-based "
                        "line index, length-normalised log-probability; fairseq-style); N <= the beam size")
    p.add_argument("--output", help="default: <train.save_dir>/translations/<split>.hyp.txt (with --input FILE: "
                                    "<input name>.hyp.txt there); stdout with --input - or --model")
    _add_json(p, "<split>.scores.json beside the translations")
    p = _command(sub, "evaluate", "score translations: BLEU/chrF/TER, BLEU by length, paired bootstrap")
    _add_config(p)
    p.add_argument("--hyp", help="default: <train.save_dir>/translations/<split>.hyp.txt")
    p.add_argument("--ref", help="default: the prepared split's target text; --hyp H --ref R without --config, "
                                 "--split or --set data.* scores the two text files alone (no prepared data needed, "
                                 "no BLEU by source length)")
    p.add_argument("--baseline", help="baseline system output: paired bootstrap resampling and approximate "
                                      "randomization of BLEU, chrF (chrF++ with --set eval.chrf_word_order=2) and TER")
    p.add_argument("--split")
    p.add_argument("--bootstrap-samples", type=_positive_int, default=1000)
    p.add_argument("--randomization-trials", type=_positive_int, default=10000,
                   help="approximate randomization trials against --baseline (sacreBLEU --paired-ar; default 10000)")
    p.add_argument("--scores", help="where the JSON goes; default: <hyp without .txt/.hyp.txt>.scores.json")
    _add_json(p, "--scores")
    p = _command(sub, "average", "average the weights of several checkpoints")
    p.add_argument("inputs", nargs="+")
    p.add_argument("--output", required=True)
    p = _command(sub, "export", "write a trained run as a self-contained folder (weights, tokenizers, config)")
    p.add_argument("run_dir", metavar="RUN_DIR", help="the run's train.save_dir")
    p.add_argument("out_dir", metavar="OUT_DIR", help="the folder to write (refused when it exists and is not empty)")
    _add_config(p)
    p.add_argument("--checkpoint", help="default: the one result.json names, else best.pt, else last.pt")
    p.add_argument("--overwrite", action="store_true", help="replace an existing OUT_DIR")
    p.add_argument("--dtype", choices=("float32", "float16"), default="float32",
                   help="how the weights are stored: float16 halves the folder; they are widened back to float32 "
                        "when loaded (check the export's BLEU: mma-nmt translate --model OUT_DIR --input ...)")
    p = _command(sub, "experiment", "reproduce a paper's tables (experiments/<paper>/experiment.toml)")
    p.description += "\n\n" + TABLE_POLICY
    p.add_argument("paper", help="a folder name under experiments/ (mma, lstm_multihead, mlmha, multihop, gmm) or a path")
    p.add_argument("--table", action="append", help="table name (repeatable); default: every table of the paper")
    p.add_argument("--scale", default="mini", choices=["full", "mini", "smoke"])
    p.add_argument("--jobs", type=int, default=1, help="runs trained side by side (each in its own process)")
    p.add_argument("--runs-dir", default="runs/experiments", help="where runs live (shared by all papers)")
    p.add_argument("--results-dir", help="default: experiments/<paper>/results/<scale>")
    p.add_argument("--bootstrap-samples", type=_positive_int, default=10000,
                   help="paired bootstrap resamples behind each table's significance daggers (default 10000)")
    p.add_argument("--dataset", action="append", help="train only this column (repeatable); default: every column")
    p.add_argument("--system", action="append",
                   help="train only this row (repeatable), e.g. a table's baseline and proposed system over all their "
                        "seeds before its other rows; default: every row")
    p.add_argument("--seed", action="append", type=int,
                   help="train only this seed (repeatable), e.g. one seed of a table's compared pair; default: every "
                        "seed of the table")
    p.add_argument("--allow-fewer", action="store_true",
                   help="rewrite a table even when it would publish fewer seeds, runs or significance daggers than it "
                        "does now (see above); without it such a table is kept and the command exits non-zero")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--from-records", action="store_true",
                      help="train nothing: rebuild the tables from the committed run records")
    mode.add_argument("--status", action="store_true",
                      help="train and write nothing: say where each run stands (recorded, training, interrupted, not "
                           "started) and print the command that trains each run without a record")
    p = _command(sub, "demo", "prepare Multi30k De-En, train the tiny MMA Transformer, translate, score")
    _add_config(p, default=str(DEMO_CONFIG))
    p.add_argument("--minutes", type=float, default=3.0, help="training time budget")
    _add_json(p, "<train.save_dir>/translations/test.scores.json")
    return parser


def commands_overview(parser: argparse.ArgumentParser) -> str:
    """``mma-nmt`` without arguments: the commands, one line each."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    width = max(len(choice.dest) for choice in sub._choices_actions)
    lines = ["usage: mma-nmt COMMAND [options]", "", parser.description, "", "commands:"]
    lines += [f"  {choice.dest:<{width}}  {choice.help}" for choice in sub._choices_actions]
    lines += ["", "mma-nmt COMMAND --help shows a command's options and an example; mma-nmt --version the version."]
    return "\n".join(lines)


def _translate(args) -> dict:
    from mma_nmt import pipeline
    from mma_nmt.cli import summary

    if args.model or args.input == "-" or args.nbest or args.preprocessed:
        from mma_nmt.cli.translate_command import translate_text

        return translate_text(args)
    run = _run_config(args)
    out = pipeline.translate(run, checkpoint=args.checkpoint, output=args.output, split=args.split,
                             input_file=args.input, progress=True, say=lambda text: print(text, file=sys.stderr))
    files = {"translations": out}
    if args.input:
        count = sum(1 for _ in out.open(encoding="utf-8"))
        result = {"translations": str(out), "sentences": count}
        summary.report(result, [f"translated {count} sentences"] + summary.files_lines(files), json_path=None,
                       as_json=args.json)
        return result
    result = pipeline.evaluate(run, hypotheses=str(out), split=args.split)
    result["translations"] = str(out)
    files["scores"] = summary.scores_path(out)
    if run.eval.attention_maps and (out.parent / "attention").is_dir():
        files["attention maps"] = out.parent / "attention"
    summary.report(result, summary.scores_lines(result) + summary.files_lines(files), json_path=files["scores"],
                   as_json=args.json)
    return result


def _names_a_split(args) -> bool:
    """Whether ``evaluate`` reads the prepared split: always without ``--ref``, and with it when a config, ``--split``
    or a ``--set data.*`` names one (for BLEU by source length); ``--hyp H --ref R`` alone scores two text files."""
    return args.ref is None or bool(args.config or args.split or any(s.startswith("data.") for s in args.set))


def _evaluate(args) -> dict:
    from mma_nmt import pipeline
    from mma_nmt.cli import summary

    run = _run_config(args)
    result = pipeline.evaluate(run, hypotheses=args.hyp, references=args.ref, baseline=args.baseline,
                               split=args.split, bootstrap_samples=args.bootstrap_samples,
                               randomization_trials=args.randomization_trials, use_split=_names_a_split(args))
    hyp = args.hyp or pipeline.default_hypotheses(run, args.split)
    json_path = Path(args.scores) if args.scores else summary.scores_path(hyp)
    summary.report(result, summary.scores_lines(result) + summary.files_lines({"scores": json_path}),
                   json_path=json_path, as_json=args.json)
    return result


def _train(args) -> dict:
    from mma_nmt import pipeline
    from mma_nmt.cli import summary

    run = _run_config(args)
    result = pipeline.train(run)
    save_dir = Path(run.train.save_dir)
    files = {"checkpoints": save_dir, "training log": save_dir / "log.jsonl"}
    summary.report(result, summary.train_lines(result) + summary.files_lines(files), json_path=None,
                   as_json=args.json)
    return result


def demo(args) -> dict:
    from mma_nmt import pipeline
    from mma_nmt.cli import summary

    args.set = [f"train.max_minutes={args.minutes}"] + args.set
    run = _run_config(args)
    quiet = args.json  # with --json, stdout holds the JSON alone
    say = (lambda text: None) if quiet else (lambda text: print(f"[demo] {text}", flush=True))
    scores = pipeline.demo(run, say=say)
    hyp, save_dir = Path(scores["translations"]), Path(run.train.save_dir)
    files = {"translations": hyp, "scores": summary.scores_path(hyp),
             "attention maps": f"{hyp.parent / 'attention'}/ ({run.eval.attention_maps} sentences)",
             "checkpoints": f"{save_dir}/ (best.pt, last.pt)", "training log": save_dir / "log.jsonl"}
    lines = [""] + summary.scores_lines(scores) + summary.files_lines(files)
    lines.append(f"\ndone in {scores['minutes_total']:.1f} minutes")
    summary.report(scores, lines, json_path=files["scores"], as_json=args.json)
    return scores


def main(argv: list[str] | None = None) -> int:
    """Runs one command. A failure prints ``mma-nmt: error: <message>`` and returns 2 (argparse's status for a bad
    command line); ``--debug`` raises it instead, with its traceback."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    argv = [arg for arg in argv if arg != "--debug"]
    parser = build_parser()
    if not argv:
        print(commands_overview(parser))
        return 0
    args = parser.parse_args(argv)
    try:
        return _run(args)
    except KeyboardInterrupt as interrupt:  # Ctrl-C: one line, the shell's status for SIGINT
        if debug:
            raise
        print(f"mma-nmt: {_interrupted(args.command, interrupt, argv)}", file=sys.stderr)
        return 130
    except Exception as error:
        if debug:
            raise
        print(f"mma-nmt: error: {_message(error)}", file=sys.stderr)
        return 2


_STARTS_OVER = ("--overwrite", "train.resume=", "train.overwrite=")  # what a resuming command must not repeat


def resume_command(argv: list[str]) -> str:
    """The command line that resumes an interrupted ``train``: ``argv`` without what would start it over
    (``--overwrite``, ``--set train.resume=...``, ``--set train.overwrite=...``)."""
    kept, skip_next = [], False
    for index, arg in enumerate(argv):
        if skip_next:
            skip_next = False
            continue
        value = arg.split("=", 1)[1] if arg.startswith("--set=") else argv[index + 1] if (
            arg == "--set" and index + 1 < len(argv)) else None
        if arg == "--overwrite" or (value is not None and value.strip().startswith(_STARTS_OVER[1:])):
            skip_next = arg == "--set"
            continue
        kept.append(arg)
    return shlex.join(["mma-nmt", *kept])


def _interrupted(command: str, interrupt: KeyboardInterrupt, argv: list[str]) -> str:
    """The line printed for Ctrl-C: where a training run stopped (its last checkpoint) and how to resume it."""
    if command != "train":
        return f"{command} interrupted"
    where = str(interrupt) or "training interrupted"
    return f"{where}; to resume, run: {resume_command(argv)}"


def _message(error: Exception) -> str:
    text = str(error.args[0]) if isinstance(error, KeyError) and error.args else str(error)  # KeyError quotes it
    return text or type(error).__name__


def _run(args) -> int:
    from mma_nmt import pipeline

    if args.command == "prepare":
        print(pipeline.prepare_data(_run_config(args)))
    elif args.command == "train":
        if args.overwrite:
            args.set = args.set + ["train.resume=false", "train.overwrite=true"]
        _train(args)
    elif args.command == "translate":
        _translate(args)
    elif args.command == "evaluate":
        _evaluate(args)
    elif args.command == "average":
        print(pipeline.average(args.inputs, args.output))
    elif args.command == "export":
        from mma_nmt.export import export_run

        print(export_run(args.run_dir, args.out_dir, checkpoint=args.checkpoint, config=args.config,
                         overrides=args.set, overwrite=args.overwrite, dtype=args.dtype))
    elif args.command == "experiment" and args.status:
        from mma_nmt.experiments.command import experiment_status

        print(experiment_status(args.paper, tables=args.table, scale=args.scale, runs_dir=args.runs_dir,
                                results_dir=args.results_dir, datasets=args.dataset, systems=args.system,
                                seeds=args.seed))
    elif args.command == "experiment":
        from mma_nmt.experiments.command import run_experiment

        run_experiment(args.paper, tables=args.table, scale=args.scale, jobs=args.jobs, runs_dir=args.runs_dir,
                       results_dir=args.results_dir, bootstrap_samples=args.bootstrap_samples,
                       from_records=args.from_records, datasets=args.dataset, systems=args.system,
                       seeds=args.seed, allow_fewer=args.allow_fewer)
    elif args.command == "demo":
        demo(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
