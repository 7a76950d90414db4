"""Dataclass configs to and from plain dicts, TOML/YAML/JSON files and dotted command-line overrides
(``model.encoder.attention=mma``)."""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from pathlib import Path
from typing import Any, Union


def to_dict(config) -> dict:
    """A plain, nested dict (only str/int/float/bool/None/list/dict) of a dataclass config."""
    return dataclasses.asdict(config)


def _convert(tp, value, where: str):
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        options = [t for t in typing.get_args(tp) if t is not type(None)]
        if value is None:
            return None
        return _convert(options[0], value, where) if len(options) == 1 else value
    if dataclasses.is_dataclass(tp):
        return from_dict(tp, value, where) if isinstance(value, dict) else value
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ValueError(f"{where} must be a list, got {value!r}")
        (item,) = typing.get_args(tp)[:1] or (Any,)
        return origin(_convert(item, v, where) for v in value)
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if tp in (int, float, str, bool) and not isinstance(value, tp):
        raise ValueError(f"{where} must be of type {tp.__name__}, got {value!r}")
    return value


def from_dict(cls, data: dict, where: str = ""):
    """Builds dataclass ``cls`` from ``data`` (nested dicts for nested dataclasses); unknown keys raise ValueError."""
    if not isinstance(data, dict):
        raise ValueError(f"{where or cls.__name__} must be a table/mapping, got {data!r}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ValueError(f"unknown key(s) {unknown} in {where or cls.__name__}; known: {sorted(names)}")
    values = {k: _convert(hints[k], v, f"{where}.{k}".lstrip(".")) for k, v in data.items()}
    return cls(**values)


def load_file(path: str | Path) -> dict:
    """A TOML (``.toml``), YAML (``.yaml``/``.yml``) or JSON file as a dict."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".toml":
        import tomllib
        return tomllib.loads(text)
    if path.suffix in (".yaml", ".yml"):
        import yaml
        return yaml.safe_load(text) or {}
    if path.suffix == ".json":
        return json.loads(text)
    raise ValueError(f"config file {path} must end in .toml, .yaml, .yml or .json")


def parse_value(text: str):
    """A command-line value: JSON/TOML-like literals (numbers, true/false, null, [lists]) or else the plain string."""
    lowered = text.strip()
    if lowered in ("true", "True"):
        return True
    if lowered in ("false", "False"):
        return False
    if lowered in ("null", "None", "none"):
        return None
    try:
        return json.loads(lowered)
    except json.JSONDecodeError:
        return text


def set_dotted(data: dict, key: str, value) -> dict:
    """In place: ``set_dotted(d, "a.b.c", v)`` sets ``d["a"]["b"]["c"] = v``, creating tables on the way."""
    *parents, last = key.strip().split(".")
    node = data
    for part in parents:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ValueError(f"setting {key!r}: {part!r} is not a table")
    node[last] = value
    return data


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    """In place: each ``a.b.c=value`` sets ``data["a"]["b"]["c"]`` (value parsed by :func:`parse_value`)."""
    for item in overrides:
        if "=" not in item:
            raise ValueError(f"override {item!r} must look like section.key=value")
        key, value = item.split("=", 1)
        set_dotted(data, key, parse_value(value))
    return data


def deep_merge(base: dict, update: dict) -> dict:
    """A new dict: ``update`` on top of ``base``, merging nested dicts."""
    merged = dict(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def require_at_least(section: str, config, **minimums) -> None:
    """Raises ``ValueError`` naming ``section.key`` for the first of ``config``'s fields below its minimum (a NaN
    fails too): every numeric setting is checked where its config is built, before any work starts."""
    for key, minimum in minimums.items():
        value = getattr(config, key)
        if not value >= minimum:
            raise ValueError(f"{section}.{key} must be at least {minimum}, got {value!r}")
