"""The converged example models committed under ``examples/``: which runs they are, where to find them, and how each
folder is built from a finished run.

Each example is the seed-1 run of a paper's convergence table (trained to patience on Multi30k), retrained with its
committed record's config and exported (``mma-nmt export``). Its folder holds the export, ``test.hyp.txt`` (the
export's translations of the raw test sources), ``card.json`` (what it is, its run's and its export's test scores)
and ``run/`` (the retrained run's record, in the format of the experiments' records). ``examples/README.md`` is
written from the cards.

    python -m mma_nmt.demos.example_models retrain mma_multi30k_de_en RUN_DIR # train (or resume) to patience
    python -m mma_nmt.demos.example_models build mma_multi30k_de_en RUN_DIR   # RUN_DIR: a finished experiment run
    python -m mma_nmt.demos.example_models readme                              # rewrite examples/README.md

``$MMA_NMT_EXAMPLES`` names another examples folder (``none``: no examples, e.g. to make the notebooks train their
own models).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

EXAMPLES_ENV = "MMA_NMT_EXAMPLES"
CARD_FILE, HYPOTHESES_FILE, RUN_RECORDS = "card.json", "test.hyp.txt", "run"


@dataclass(frozen=True)
class ExampleModel:
    """One example: its folder name, the convergence-table run it retrains and how its weights are stored."""

    name: str  # its folder under examples/
    paper: str  # experiments/<paper>
    system: str  # the row of the paper's convergence table (seed 1)
    dataset: str  # the table's column (the dataset role it stands for; the data is Multi30k)
    record: str  # the committed record of that run, relative to the repository
    dtype: str  # float32 or float16 (mma-nmt export --dtype)
    label: str  # what the model is, in a few words

    @property
    def record_path(self) -> Path:
        return repository_root() / self.record


_RUNS = "experiments/{paper}/results/mini/runs/{dataset}/{run}/record.json"
EXAMPLES: dict[str, ExampleModel] = {e.name: e for e in (
    ExampleModel("mma_multi30k_de_en", "mma", "mma_to_patience", "de_en",
                 _RUNS.format(paper="mma", dataset="de_en", run="mma_to_patience-seed1-79af87e532"), "float32",
                 "Transformer, MMA encoder heads GLFB (window 1)"),
    ExampleModel("baseline_multi30k_de_en", "mma", "baseline_to_patience", "de_en",
                 _RUNS.format(paper="mma", dataset="de_en", run="baseline_to_patience-seed1-3efb987faf"), "float32",
                 "Transformer baseline (all heads global)"),
    ExampleModel("gmm_multi30k_en_de", "gmm", "ours_to_patience", "en_de",
                 _RUNS.format(paper="gmm", dataset="en_de", run="ours_to_patience-seed1-d98ff27f72"), "float16",
                 "Transformer, GMM concentrated cross-attention (K = 4)"),
    ExampleModel("lstm_h4_multi30k_en_de", "lstm_multihead", "h4_to_patience", "en_vi",
                 _RUNS.format(paper="lstm_multihead", dataset="en_vi", run="h4_to_patience-seed1-3d78d8c5e3"),
                 "float16", "LSTM encoder-decoder, 4-head Luong attention"),
    ExampleModel("mlmha_m10_multi30k_en_de", "mlmha", "m10_to_patience", "en_de",
                 _RUNS.format(paper="mlmha", dataset="en_de", run="m10_to_patience-seed1-d40820698a"), "float16",
                 "Transformer, multi-layer multi-head cross-attention M-10"),
    ExampleModel("multihop_multi30k_de_en", "multihop", "hop4_to_patience", "iwslt_de_en",
                 _RUNS.format(paper="multihop", dataset="iwslt_de_en", run="hop4_to_patience-seed1-73fd430354"), "float16",
                 "Transformer, multi-hop attention in encoder layer 4"),
)}


def repository_root() -> Path:
    return Path(__file__).resolve().parents[2]


def examples_dir() -> Path | None:
    """``$MMA_NMT_EXAMPLES`` (``none`` or empty: no examples), else the repository's ``examples/`` when it exists
    (a checkout; an installed wheel has none)."""
    value = os.environ.get(EXAMPLES_ENV)
    if value is not None:
        return None if value.strip().lower() in ("", "none") else Path(value)
    folder = repository_root() / "examples"
    return folder if folder.is_dir() else None


def example_export(name: str) -> Path | None:
    """The folder of example ``name`` when it is there (a complete export with its card), else None."""
    from mma_nmt.export import is_export

    if name not in EXAMPLES:
        raise KeyError(f"no example model {name!r}; the examples are {', '.join(EXAMPLES)}")
    root = examples_dir()
    found = root is not None and is_export(root / name) and (root / name / CARD_FILE).is_file()
    return root / name if found else None


def read_card(folder: str | Path) -> dict:
    return json.loads((Path(folder) / CARD_FILE).read_text(encoding="utf-8"))


def raw_test_split(corpus: str, *, progress: bool = False) -> tuple[list[str], list[str]]:
    """The raw (source, reference) lines of ``corpus``'s test split, from the local data directory or, when it is not
    there, downloaded as ``mma-nmt prepare`` would."""
    from mma_nmt.data.prepare import PrepareConfig, locate_splits
    from mma_nmt.data.reader import read_parallel

    found = locate_splits(PrepareConfig(corpus=corpus, download=True, progress=progress), ["test"])
    text = read_parallel(*found["test"], on_error="fail")
    return text.src, text.tgt


def _export_scores(folder: Path, corpus: str) -> tuple[dict, list[str]]:
    """Test scores of the export in ``folder`` on the raw test split, and its translations."""
    from mma_nmt.evaluation.scoring import score_corpus
    from mma_nmt.translator import Translator

    sources, references = raw_test_split(corpus)
    translator = Translator.from_pretrained(folder, device="cpu")
    hypotheses = translator.translate(sources, progress=True)
    scores = score_corpus(hypotheses, references, lang=translator.config["corpus"]["tgt_lang"])
    return {"bleu": scores.bleu, "bleu_signature": scores.bleu_signature, "chrf": scores.chrf, "ter": scores.ter,
            "tokenized_bleu": scores.tokenized_bleu, "sentences": len(hypotheses)}, hypotheses


def _record_run(example: ExampleModel, run_dir: Path, folder: Path) -> Path:
    """Writes the finished run's record under ``folder/run`` (the experiments' record format); returns its file."""
    from mma_nmt.experiments.records import RECORD_FILE, write_record
    from mma_nmt.experiments.spec import load_experiment

    experiment = load_experiment(repository_root() / "experiments" / example.paper / "experiment.toml")
    planned = dataclasses.replace(experiment.cell(example.system, example.dataset, "mini", seed=1), run_dir=run_dir)
    if planned.identity != json.loads(example.record_path.read_text(encoding="utf-8"))["identity"]:
        raise ValueError(f"the recipe of {example.paper} {example.system} no longer gives the config of "
                         f"{example.record} (identity {planned.identity}): the example would not retrain that record")
    result = json.loads((run_dir / "result.json").read_text(encoding="utf-8"))
    return write_record(planned, result, folder / RUN_RECORDS) / RECORD_FILE


def write_retraining_cell(name: str, run_dir: str | Path) -> Path:
    """Makes ``run_dir`` an experiment run of example ``name``'s record config (its ``cell.json``, the runner's
    format), so that ``python -m mma_nmt.experiments.runner run_dir`` trains it to patience, or resumes it. A run
    directory that already holds another config is refused, not overwritten."""
    from mma_nmt.data.fileio import atomic_write_json
    from mma_nmt.experiments.runner import CELL_FILE

    example, run_dir = EXAMPLES[name], Path(run_dir)
    record = json.loads(example.record_path.read_text(encoding="utf-8"))
    cell = {**{key: record[key] for key in ("experiment", "system", "dataset", "scale", "identity", "average_last")},
            "config": record["config"]}
    path = run_dir / CELL_FILE
    if path.is_file():
        held = json.loads(path.read_text(encoding="utf-8"))
        if held.get("config") != cell["config"]:
            raise ValueError(f"{path} holds another run's config, not the config of {example.record}; "
                             f"retrain example {name} in an empty directory")
        return path
    run_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, cell)
    return path


def build_example(name: str, run_dir: str | Path, *, out_root: str | Path | None = None) -> Path:
    """Exports the finished run ``run_dir`` (an experiment run trained with example ``name``'s record config) as
    example ``name`` under ``out_root`` (default: the repository's ``examples/``), scores the export on the raw test
    split and writes its card. Refuses a run whose config is not the record's."""
    from mma_nmt.data.fileio import atomic_write_json, atomic_write_lines, sha256_file
    from mma_nmt.export import WEIGHTS_FILE, export_run

    example, run_dir = EXAMPLES[name], Path(run_dir)
    original = json.loads(example.record_path.read_text(encoding="utf-8"))
    cell = json.loads((run_dir / "cell.json").read_text(encoding="utf-8"))
    if cell["config"] != original["config"]:
        raise ValueError(f"{run_dir} was not trained with the config of {example.record}: not example {name}")
    folder = Path(out_root or repository_root() / "examples") / name
    export_run(run_dir, folder, checkpoint=run_dir / "best.pt", dtype=example.dtype, overwrite=True,
               provenance={"retrains_record": example.record})
    record_file = _record_run(example, run_dir, folder)
    record = json.loads(record_file.read_text(encoding="utf-8"))
    scores, hypotheses = _export_scores(folder, original["corpus"])
    atomic_write_lines(folder / HYPOTHESES_FILE, hypotheses)
    card = {"name": name, "label": example.label, "paper": example.paper, "system": example.system, "seed": 1,
            "corpus": original["corpus"], "data": original["data"],
            "retrains": {"record": example.record, "bleu": original["metrics"]["bleu"],
                         "software": original["software"], "hardware": original["hardware"]},
            "run": {"record": str(record_file.relative_to(folder)), "bleu": record["metrics"]["bleu"],
                    "chrf": record["metrics"]["chrf"], "ter": record["metrics"]["ter"],
                    "stopping": record["stopping"], "train_minutes": record["training"]["train_minutes"],
                    "software": record["software"], "hardware": record["hardware"]},
            "export": {"dtype": example.dtype, "bytes": (folder / WEIGHTS_FILE).stat().st_size,
                       "weights_sha256": sha256_file(folder / WEIGHTS_FILE),
                       "translations_sha256": sha256_file(folder / HYPOTHESES_FILE), **scores}}
    atomic_write_json(folder / CARD_FILE, card)
    write_readme(folder.parent)
    return folder


README_HEAD = """# Example models

Converged models that a fresh clone can translate with, no training needed:

```bash
echo "Ein Mann fährt mit dem Fahrrad durch die Stadt." | mma-nmt translate --model examples/mma_multi30k_de_en --input -
```

```python
from mma_nmt import Translator
Translator.from_pretrained("examples/mma_multi30k_de_en").translate(["Zwei Hunde spielen im Schnee."])
```

Each is the seed-1 run of a paper's convergence table, trained on Multi30k (29,000 training pairs, joint 2,000-piece
SentencePiece vocabulary) until five validations brought no new best validation loss, retrained from the committed
record's config and exported with `mma-nmt export` (float16 where it halves the size: the weights are widened back to
float32 when loaded). A notebook opens on them when no local run exists and every model it shows has one here
(`notebooks/README.md`). Test BLEU is sacreBLEU (13a, mixed case)
on the Multi30k test set (test_2016_flickr, 1,000 sentences), decoded with the run's beam search settings:

- **record**: the committed run the example retrains (its table's number);
- **retrained**: this retraining, on the code named in its record (`run/`), decoded from its best checkpoint;
- **export**: the exported folder translating the raw test sources (`test.hyp.txt`), with its weights as stored.

A retraining is bit-for-bit the recorded run only on the same code and CPU type. The code changed in between (each
record names its commit; training now computes the logits of every target position, which changes the last bits), so
a retrained run follows its own trajectory and its BLEU is another draw from the same config, not the record's number.
Retrain one with `python -m mma_nmt.demos.example_models retrain NAME RUN_DIR` (the record's config to patience in
RUN_DIR, resumed where a killed run left off, then exported here), or rebuild one from a finished run with
`python -m mma_nmt.demos.example_models build NAME RUN_DIR` (RUN_DIR: an experiment run directory with the record's
config in its `cell.json`).

"""


def write_readme(root: str | Path) -> Path:
    """Writes ``root/README.md``: the header above and one table row per example folder with a card."""
    from mma_nmt.data.fileio import atomic_write_text

    rows = ["| example | what | record | retrained | export | size | trained on |",
            "|---|---|---|---|---|---|---|"]
    missing = []
    for name, example in EXAMPLES.items():
        if not (Path(root) / name / CARD_FILE).is_file():
            missing.append(f"`{name}` ({example.label}, {example.paper} `{example.system}`)")
            continue
        card = read_card(Path(root) / name)
        run, export = card["run"], card["export"]
        hardware = run["hardware"].get("gpu") or run["hardware"].get("cpu")
        best = run["stopping"].get("best_update")
        when = f" (best at {best:,} updates)" if best else ""
        rows.append(f"| [`{name}`]({name}/) | {card['label']} | [{card['retrains']['bleu']:.2f}](../{example.record}) "
                    f"| [{run['bleu']:.2f}]({name}/{run['record']}){when} "
                    f"| {export['bleu']:.2f} ({export['dtype']}) | {export['bytes'] / 2**20:.1f} MiB "
                    f"| {hardware}, {run['train_minutes']:.0f} min |")
    text = README_HEAD + "\n".join(rows) + "\n"
    if missing:
        text += "\nNot yet retrained and exported: " + "; ".join(missing) + ".\n"
    return atomic_write_text(Path(root) / "README.md", text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mma_nmt.demos.example_models", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="export a finished run as an example, score it, write its card")
    build.add_argument("name", choices=sorted(EXAMPLES))
    build.add_argument("run_dir")
    build.add_argument("--out-root", help="default: the repository's examples/")
    retrain = sub.add_parser("retrain", help="train (or resume) the example's record config to patience in RUN_DIR, "
                                             "then build the example from it")
    retrain.add_argument("name", choices=sorted(EXAMPLES))
    retrain.add_argument("run_dir")
    retrain.add_argument("--out-root", help="default: the repository's examples/")
    retrain.add_argument("--no-build", action="store_true", help="train only")
    readme = sub.add_parser("readme", help="rewrite examples/README.md from the cards")
    readme.add_argument("--out-root")
    args = parser.parse_args(argv)
    root = Path(args.out_root or repository_root() / "examples")
    if args.command == "retrain":
        from mma_nmt.experiments.runner import run_cell

        write_retraining_cell(args.name, args.run_dir)
        result = run_cell(args.run_dir)
        print(f"{args.name}: trained to {args.run_dir}, test BLEU {result['bleu']:.2f}")
        if not args.no_build:
            print(build_example(args.name, args.run_dir, out_root=root))
    elif args.command == "build":
        print(build_example(args.name, args.run_dir, out_root=root))
    else:
        print(write_readme(root))
    return 0


if __name__ == "__main__":
    sys.exit(main())
