"""A paper's reproduction as data: ``experiments/<paper>/experiment.toml`` names its datasets, systems and tables.

- ``[datasets.<role>]``: a language pair of the paper (``de_en``, ``ja_en``, ...); its ``label`` names the paper's
  corpus. One run config per scale (``full``, ``mini``, ``smoke``):
  ``{ base = "file.toml", set = { "dotted.key" = value }, average_last = N, label = "..." }``. ``base`` is relative to
  the experiment file; ``set`` goes on top of it. ``label`` names the data the runs of that scale train and test on
  (required below ``full``, where it is never the paper's corpus: "Multi30k De-En (for IWSLT14 De-En)").
- ``[systems.<name>]``: a row of the paper's tables: ``label``, ``set`` (dotted config keys, applied at every scale),
  ``scale_set`` (``{ mini = { key = value } }``: extra keys at one scale, e.g. a layer index of a smaller model) and
  ``average_last`` (``{ full = 20 }``: replaces the dataset recipe's ``average_last`` at that scale, e.g. for a big
  model trained longer). A cell that averages N checkpoints must keep N (``train.keep_periodic``).
- ``[tables.<name>]``: ``title``, ``columns`` (dataset roles), ``rows`` (system names), ``baseline`` (a row; ``deltas``
  maps a row to another baseline row, for tables that compare each row with its own counterpart), ``metric``
  (``"bleu"`` = sacreBLEU, or ``"tokenized_bleu"``), ``scales`` (where the table runs; default all), ``seeds``
  (``{ mini = [1, 2, 3] }``: every row trained once per seed at that scale; default: the recipe's own seed) and
  ``paper`` (``{ row = { column = BLEU } }``, the paper's numbers).

Any other key, at any level, is an error naming the file and the key's path (``tabels``, ``datasets.de_en.lable``),
as in run configs; a file without tables (e.g. a run config) is not an experiment and is refused.

:func:`load_experiment` reads and validates all of it (each recipe file once, when a run first needs it), and
:meth:`Experiment.plan` resolves the runs of the tables a command works on, each once, into :class:`PlannedRun` objects.
"""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mma_nmt.config_io import from_dict, load_file, set_dotted
from mma_nmt.training.config import RunConfig, run_config_from_dict

SCALES = ("full", "mini", "smoke")
RUNS_DIR = "runs/experiments"  # where runs live, under <scale>/<corpus>/<system>-<identity> (shared by all papers)
METRICS = ("bleu", "tokenized_bleu")
# Settings that change how a run executes but not what it computes: left out of a run's identity.
_NOT_IDENTITY = (("train", "save_dir"), ("train", "progress"), ("train", "threads"), ("train", "device"),
                 ("train", "loggers"))


def identity_config(config: dict) -> dict:
    """A copy of a raw run config without the settings that are not part of a run's identity."""
    config = copy.deepcopy(config)
    for section, key in _NOT_IDENTITY:
        config.get(section, {}).pop(key, None)
    return config


def run_identity(config: dict, average_last: int) -> str:
    """A run's identity: a hash of its raw run config (as the recipe gives it, without :func:`identity_config`'s
    settings) and of the checkpoints it averages. Records are filed and found by it, so it must never change for a
    committed record (``tests/python/experiments/test_record_identities.py``)."""
    text = json.dumps({"config": identity_config(config), "average_last": average_last}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:10]


class ExperimentError(ValueError):
    """A malformed experiment file; the message names the file and the offending entry."""


@dataclass
class ScaleRecipe:
    base: Path
    set: dict = field(default_factory=dict)
    average_last: int = 0  # translate with the average of the last N periodic checkpoints (0: best.pt, else last.pt)
    label: str = ""  # the data these runs use, when it is not the paper's corpus


@dataclass
class Dataset:
    role: str
    label: str  # the paper's corpus
    scales: dict[str, ScaleRecipe]

    def data_label(self, scale: str) -> str:
        """What our runs at ``scale`` train and test on (the paper's corpus only at ``full`` scale)."""
        recipe = self.scales.get(scale)
        return recipe.label if recipe is not None and recipe.label else self.label


@dataclass
class System:
    name: str
    label: str
    set: dict = field(default_factory=dict)
    note: str = ""
    scale_set: dict[str, dict] = field(default_factory=dict)
    average_last: dict[str, int] = field(default_factory=dict)  # scale -> N, over the dataset recipe's


@dataclass
class Table:
    name: str
    title: str
    columns: list[str]
    rows: list[str]
    baseline: str
    deltas: dict[str, str] = field(default_factory=dict)
    metric: str = "bleu"
    paper: dict[str, dict[str, float]] = field(default_factory=dict)
    note: str = ""
    scales: tuple[str, ...] = SCALES  # e.g. ("full",) for a table of big models that only makes sense at full scale
    seeds: dict[str, list[int]] = field(default_factory=dict)  # scale -> training seeds of the seeded rows
    seed_rows: list[str] = field(default_factory=list)  # rows trained with every seed (default all); others: the first

    def seeds_at(self, scale: str, row: str | None = None) -> list[int | None]:
        """The seeds ``row`` is trained with at ``scale`` (None: the recipe's own seed, one run)."""
        seeds = list(self.seeds.get(scale, [])) or [None]
        if row is not None and self.seed_rows and row not in self.seed_rows:
            return seeds[:1]
        return seeds

    def baseline_of(self, row: str) -> str:
        return self.deltas.get(row, self.baseline)


@dataclass(frozen=True)
class PlannedRun:
    """One system trained and scored on one dataset at one scale with one seed, resolved once from the recipe
    (:meth:`Experiment.plan`): everything the runner, the status, the continuation of capped runs, the records and the
    tables read about a run. A run that two tables share (the same identity) is one run in one directory."""

    system: System
    dataset: Dataset
    scale: str
    seed: int
    config: dict  # the raw run config as the recipe gives it, without train.save_dir: what the identity hashes and
    # cell.json and the record keep (never changed after planning)
    run_config: RunConfig  # the same config, typed, saving into run_dir
    average_last: int  # translate with the average of the last N periodic checkpoints (0: best.pt, else last.pt)
    identity: str  # run_identity(config, average_last): equal configs share one run, across tables and papers
    run_dir: Path
    table: str | None = None  # the table it was planned for (None: asked for by name, e.g. by an analysis)
    baseline: str | None = None  # the row of that table it is compared with (its own name for the baseline row)

    @property
    def key(self) -> tuple[str, str]:
        return self.system.name, self.dataset.role


def distinct(runs: list[PlannedRun]) -> list[PlannedRun]:
    """The first planned run of each identity, in order (a run in two tables is trained and recorded once)."""
    first: dict[str, PlannedRun] = {}
    for run in runs:
        first.setdefault(run.identity, run)
    return list(first.values())


@dataclass(frozen=True)
class Plan:
    """The runs of the tables one command works on at one scale, each resolved once (:meth:`Experiment.plan`)."""

    experiment: Experiment
    scale: str
    runs_dir: Path
    tables: dict[str, list[PlannedRun]]  # table name -> its runs in reading order (row, seed, column)

    @property
    def runs(self) -> list[PlannedRun]:
        """Every run of every table, in reading order (a run in two tables comes twice, once for each)."""
        return [run for runs in self.tables.values() for run in runs]


def _run_dir(runs_dir: Path, scale: str, identity: str, corpus: str, system: str) -> Path:
    """``<runs_dir>/<scale>/<corpus>/<system>-<identity>``; an existing directory of the same identity (the same run
    under another system name, e.g. another paper's baseline) is reused."""
    existing = sorted((runs_dir / scale).glob(f"*/*-{identity}"))
    return existing[0] if existing else runs_dir / scale / corpus / f"{system}-{identity}"


@dataclass
class Experiment:
    name: str
    title: str
    path: Path
    datasets: dict[str, Dataset]
    systems: dict[str, System]
    tables: dict[str, Table]
    _recipe_files: dict[Path, dict] = field(default_factory=dict, repr=False, compare=False)  # each read once

    def plan(self, tables: list[str], scale: str, runs_dir: str | Path = RUNS_DIR) -> Plan:
        """The (row, column) runs of ``tables`` at ``scale``, each table's in reading order; columns whose dataset has
        no recipe at ``scale`` (e.g. a licensed corpus at the mini scale) are left out."""
        runs_dir, claimed = Path(runs_dir), {}  # claimed: identity -> its run directory, shared by every table
        planned = {}
        for name in tables:
            table = self._table_at(name, scale)
            planned[name] = [self._planned(row, column, scale, seed, runs_dir, claimed, table)
                             for row in table.rows for seed in table.seeds_at(scale, row)
                             for column in table.columns if self.has_recipe(column, scale)]
        return Plan(experiment=self, scale=scale, runs_dir=runs_dir, tables=planned)

    def cells(self, table: str, scale: str, runs_dir: str | Path = RUNS_DIR) -> list[PlannedRun]:
        """The runs of one table (:meth:`plan`)."""
        return self.plan([table], scale, runs_dir).tables[table]

    def cell(self, system: str, role: str, scale: str, *, seed: int | None = None,
             runs_dir: str | Path = RUNS_DIR) -> PlannedRun:
        """One system on one dataset at one scale, of no table; ``seed`` replaces the recipe's ``train.seed``."""
        return self._planned(system, role, scale, seed, Path(runs_dir), {}, None)

    def has_recipe(self, role: str, scale: str) -> bool:
        return scale in self.datasets[role].scales

    def _table_at(self, name: str, scale: str) -> Table:
        if name not in self.tables:
            raise ExperimentError(f"{self.path}: no table {name!r}; tables: {', '.join(self.tables)}")
        table = self.tables[name]
        if scale not in table.scales:
            raise ExperimentError(f"{self.path}: table {name!r} runs only at scale(s) {', '.join(table.scales)}")
        return table

    def _recipe_config(self, system: str, role: str, scale: str, seed: int | None) -> tuple[dict, int]:
        """The raw run config of ``system`` on ``role`` at ``scale`` (the recipe's file, its ``set``, the system's
        ``set`` and ``scale_set``, the seed) without ``train.save_dir``, and the checkpoints it averages."""
        if scale not in SCALES:
            raise ExperimentError(f"unknown scale {scale!r}; scales: {', '.join(SCALES)}")
        dataset, spec = self.datasets[role], self.systems[system]
        if scale not in dataset.scales:
            raise ExperimentError(f"{self.path}: dataset {role!r} has no {scale!r} recipe")
        recipe, file = dataset.scales[scale], dataset.scales[scale].base.resolve()
        if file not in self._recipe_files:
            self._recipe_files[file] = load_file(recipe.base)
        config = copy.deepcopy(self._recipe_files[file])
        for key, value in {**recipe.set, **spec.set, **spec.scale_set.get(scale, {})}.items():
            set_dotted(config, key, copy.deepcopy(value))
        if seed is not None:
            set_dotted(config, "train.seed", int(seed))
        config.get("train", {}).pop("save_dir", None)
        return config, spec.average_last.get(scale, recipe.average_last)

    def _planned(self, system: str, role: str, scale: str, seed: int | None, runs_dir: Path,
                 claimed: dict[str, Path], table: Table | None) -> PlannedRun:
        config, average_last = self._recipe_config(system, role, scale, seed)
        run_config = _checked_run_config(config, average_last,
                                         f"{self.path}: system {system!r} on {role!r} at scale {scale!r}")
        identity = run_identity(config, average_last)
        if identity not in claimed:
            claimed[identity] = _run_dir(runs_dir, scale, identity, run_config.data.corpus, system)
        run_config.train.save_dir = str(claimed[identity])
        return PlannedRun(system=self.systems[system], dataset=self.datasets[role], scale=scale,
                          seed=run_config.train.seed, config=config, run_config=run_config,
                          average_last=average_last, identity=identity, run_dir=claimed[identity],
                          table=table.name if table else None, baseline=table.baseline_of(system) if table else None)


def _checked_run_config(config: dict, average_last: int, where: str) -> RunConfig:
    """``config`` typed; refused (naming ``where``) when it is no valid run config or keeps fewer periodic checkpoints
    than it averages (else the run would fail only after training, when it averages)."""
    try:
        run = run_config_from_dict(copy.deepcopy(config))
    except (ValueError, TypeError) as error:
        raise ExperimentError(f"{where}: {error}") from None
    if run.train.keep_periodic < average_last:
        raise ExperimentError(f"{where}: average_last = {average_last} needs train.keep_periodic >= {average_last}, "
                              f"got {run.train.keep_periodic}")
    return run


def _table(name: str, raw: dict, path: Path) -> Table:
    where = f"{path}: tables.{name}"
    if "name" in raw:  # a table is named by its section
        raise ExperimentError(f"{where}: unknown key(s) ['name']")
    try:
        table = from_dict(Table, {"name": name, **raw}, f"tables.{name}")
    except ValueError as error:  # names the key: "tables.<name>.title", "unknown key(s) [...] in tables.<name>"
        raise ExperimentError(f"{path}: {error}") from None
    for scale, seeds in table.seeds.items():
        if scale not in SCALES or not seeds or len(set(seeds)) != len(seeds):
            raise ExperimentError(f"{where}: seeds.{scale} must be a scale among {SCALES} with distinct seeds, "
                                  f"got {seeds}")
    if not set(table.scales) <= set(SCALES):
        raise ExperimentError(f"{where}: scales {list(table.scales)} must be among {SCALES}")
    if table.metric not in METRICS:
        raise ExperimentError(f"{where}: metric {table.metric!r} is not one of {METRICS}")
    return table


@dataclass
class _ExperimentFile:
    """The keys ``experiment.toml`` may hold at its top level (checked with :func:`~mma_nmt.config_io.from_dict`)."""

    name: str = ""
    title: str = ""
    datasets: dict[str, dict[str, Any]] = field(default_factory=dict)
    systems: dict[str, dict[str, Any]] = field(default_factory=dict)
    tables: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass
class _DatasetEntry:
    """The keys of a ``[datasets.<role>]`` section: the paper's corpus name and one recipe per scale."""

    label: str = ""
    full: dict[str, Any] | None = None
    mini: dict[str, Any] | None = None
    smoke: dict[str, Any] | None = None


@dataclass
class _RecipeEntry:
    """The keys of one scale's recipe, ``{ base = "file.toml", set = {...}, average_last = N, label = "..." }``."""

    base: str
    set: dict[str, Any] = field(default_factory=dict)
    average_last: int = 0
    label: str = ""


def _checked(cls, data, where: str, path: Path):
    """``data`` as dataclass ``cls``; an unknown or missing key is an error naming ``path`` and the key's path."""
    try:
        return from_dict(cls, data, where)
    except ValueError as error:
        raise ExperimentError(f"{path}: {error}") from None


def _dataset(role: str, raw: dict, path: Path) -> Dataset:
    spec = _checked(_DatasetEntry, raw, f"datasets.{role}", path)
    scales = {}
    for scale in SCALES:
        if getattr(spec, scale) is None:
            continue
        entry = _checked(_RecipeEntry, getattr(spec, scale), f"datasets.{role}.{scale}", path)
        base = path.parent / entry.base
        if not base.is_file():
            raise ExperimentError(f"{path}: datasets.{role}.{scale}.base {base} does not exist")
        scales[scale] = ScaleRecipe(base=base, set=dict(entry.set), average_last=entry.average_last, label=entry.label)
        if scale != "full" and not entry.label:
            raise ExperimentError(f"{path}: datasets.{role}.{scale} needs a label naming the data it runs on "
                                  f"(our {scale} numbers must not sit under the paper's corpus name)")
    return Dataset(role=role, label=spec.label or role, scales=scales)


def _system(name: str, spec: dict, path: Path) -> System:
    unknown = sorted(set(spec) - {"label", "set", "note", "scale_set", "average_last"}) + sorted(
        (set(spec.get("scale_set", {})) | set(spec.get("average_last", {}))) - set(SCALES))
    if unknown:
        raise ExperimentError(f"{path}: systems.{name}: unknown key(s) {unknown}")
    return System(name=name, label=spec.get("label", name), set=dict(spec.get("set", {})), note=spec.get("note", ""),
                  scale_set={k: dict(v) for k, v in spec.get("scale_set", {}).items()},
                  average_last={k: int(v) for k, v in spec.get("average_last", {}).items()})


def _check_names(table: Table, datasets: dict[str, Dataset], systems: dict[str, System], path: Path) -> None:
    """Refuses a table that names a column, row or baseline the experiment does not have."""
    where = f"{path}: tables.{table.name}"
    for role in table.columns:
        if role not in datasets:
            raise ExperimentError(f"{where}: column {role!r} is not a dataset; datasets: {sorted(datasets)}")
    for row in table.rows + [table.baseline] + list(table.deltas.values()) + table.seed_rows:
        if row not in systems:
            raise ExperimentError(f"{where}: row {row!r} is not a system; systems: {sorted(systems)}")
    for row in [table.baseline, *table.deltas.values()]:
        if row not in table.rows:
            raise ExperimentError(f"{where}: baseline {row!r} must be one of the table's rows")
    for row, values in table.paper.items():
        if row not in table.rows or not set(values) <= set(table.columns):
            raise ExperimentError(f"{where}: paper numbers for {row!r} {sorted(values)} do not match the "
                                  f"rows {table.rows} / columns {table.columns}")


def load_experiment(path: str | Path) -> Experiment:
    """Reads and checks ``experiment.toml`` (or a directory holding one)."""
    path = Path(path)
    if path.is_dir():
        path = path / "experiment.toml"
    if not path.is_file():
        raise ExperimentError(f"no experiment file {path}")
    raw = _checked(_ExperimentFile, load_file(path), "the top level", path)
    if not raw.tables:
        raise ExperimentError(f"{path} is not an experiment: it has no [tables.<name>] section (an experiment file "
                              f"names its [datasets.*], [systems.*] and [tables.*]; see experiments/README.md)")
    datasets = {role: _dataset(role, spec, path) for role, spec in raw.datasets.items()}
    systems = {name: _system(name, spec, path) for name, spec in raw.systems.items()}
    tables = {name: _table(name, spec, path) for name, spec in raw.tables.items()}
    for table in tables.values():
        _check_names(table, datasets, systems, path)
    return Experiment(name=raw.name or path.parent.name, title=raw.title or path.parent.name, path=path,
                      datasets=datasets, systems=systems, tables=tables)


__all__ = ["SCALES", "RUNS_DIR", "Experiment", "ExperimentError", "PlannedRun", "Plan", "Table", "System", "Dataset",
           "distinct", "load_experiment", "run_identity"]
