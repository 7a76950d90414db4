"""A run's ``[data]`` section against the prepared folder it names (``data.out_dir``).

Training reads the prepared folder, not the raw corpus: once ``data.out_dir/meta.json`` exists, ``[data]`` no longer
prepares anything. So every setting that ``[data]`` gives and that decides what the folder holds (the corpus, the
subword model, the preprocessing, the filtering, the splits: :data:`OUTPUT_SETTINGS`) must equal the one recorded in
``meta.json``; a difference is an error that names it. Settings left out of ``[data]`` are the folder's. Settings of
place and speed (where the corpus is read from or downloaded to, progress bars, workers) may differ. See
``docs/data.md``.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from mma_nmt.data.prepare import PrepareConfig

PLACE_AND_SPEED_SETTINGS = ("out_dir", "data_dir", "download_dir", "download", "mirror", "progress", "workers")
OUTPUT_SETTINGS = tuple(f.name for f in dataclasses.fields(PrepareConfig) if f.name not in PLACE_AND_SPEED_SETTINGS)


def recorded_settings(prepared_dir: str | Path) -> dict | None:
    """The ``[data]`` settings ``prepared_dir`` was prepared with (``meta.json``'s ``config``), or None when the folder
    has no complete preparation (no ``meta.json``, or one written by a ``prepare`` that did not finish)."""
    path = Path(prepared_dir) / "meta.json"
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (ValueError, OSError) as error:
        raise ValueError(f"{path} cannot be read ({error}); remove {Path(prepared_dir)} to prepare it again") from None
    config = meta.get("config") if isinstance(meta, dict) else None
    return config if isinstance(config, dict) else None


def _comparable(key: str, value):
    if key == "splits" and value is not None:
        return sorted(value)
    return json.loads(json.dumps(value))  # tuples as lists, as meta.json holds them


def check_prepared_matches(section: PrepareConfig, prepared_dir: str | Path) -> None:
    """Raises ValueError when a setting given in ``section`` (a run config's ``[data]``, see
    :meth:`PrepareConfig.given_settings`) differs from the one ``prepared_dir`` was prepared with, naming each
    ``data.<key>``, both values and the ways out. Does nothing when the folder holds no complete preparation yet."""
    recorded = recorded_settings(prepared_dir)
    if recorded is None:
        return
    given = section.given_settings()
    differences = [f"data.{key} is {getattr(section, key)!r} in the run config but {recorded.get(key)!r} in its "
                   f"meta.json" for key in OUTPUT_SETTINGS
                   if key in given and _comparable(key, getattr(section, key)) != _comparable(key, recorded.get(key))]
    if differences:
        raise ValueError(f"{prepared_dir} was prepared with other [data] settings ({'; '.join(differences)}), and "
                         f"training would use it as it is: prepare into another data.out_dir, or remove "
                         f"{prepared_dir} to prepare it again with these settings")
