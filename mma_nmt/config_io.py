"""Dataclass configs to and from plain dicts, TOML/YAML/JSON files and dotted command-line overrides
(``model.encoder.attention=mma``).

A choice field is typed ``Literal["a", "b", ...]``: :func:`from_dict` refuses any other value, naming the dotted key
and the choices, and a config built in Python checks itself with :func:`check_choices` in ``__post_init__``."""

from __future__ import annotations

import dataclasses
import functools
import json
import types
import typing
from pathlib import Path
from typing import Any, Union


def to_dict(config) -> dict:
    """A plain, nested dict (only str/int/float/bool/None/list/dict) of a dataclass config."""
    return dataclasses.asdict(config)


def choice_error(key: str, value, choices: tuple) -> ValueError:
    """``key must be 'a' or 'b', got 'c'`` (one of [...] for three choices or more)."""
    shown = sorted(choices, key=repr)
    if len(shown) == 1:
        expected = repr(shown[0])
    elif len(shown) == 2:
        expected = f"{shown[0]!r} or {shown[1]!r}"
    else:
        expected = f"one of {shown}"
    return ValueError(f"{key} must be {expected}, got {value!r}")


def _convert(tp, value, where: str):
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        choices = typing.get_args(tp)
        if value not in choices:
            raise choice_error(where, value, choices)
        return value
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
    if origin is dict:
        if not isinstance(value, dict):
            raise ValueError(f"{where} must be a table/mapping, got {value!r}")
        key_type, value_type = typing.get_args(tp) or (Any, Any)
        return {_convert(key_type, k, where): _convert(value_type, v, f"{where}.{k}") for k, v in value.items()}
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
    missing = [f.name for f in dataclasses.fields(cls) if f.init and f.name not in data
               and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    if missing:
        raise ValueError(f"{where or cls.__name__} is missing key(s) {missing}")
    values = {k: _convert(hints[k], v, f"{where}.{k}".lstrip(".")) for k, v in data.items()}
    return cls(**values)


@functools.cache
def _choice_fields(cls) -> dict[str, tuple]:
    """The ``Literal`` fields of dataclass ``cls``: name -> choices (None among them for an ``Optional`` one)."""
    fields, hints = {}, typing.get_type_hints(cls)
    for name, tp in ((f.name, hints[f.name]) for f in dataclasses.fields(cls)):
        args = typing.get_args(tp) if typing.get_origin(tp) in (Union, types.UnionType) else (tp,)
        literals = [arg for arg in args if typing.get_origin(arg) is typing.Literal]
        if literals:
            fields[name] = tuple(c for arg in literals for c in typing.get_args(arg)) + (
                (None,) if type(None) in args else ())
    return fields


def check_choices(section: str, config) -> None:
    """Raises ``ValueError`` naming ``section.key`` and the choices for the first ``Literal`` field of dataclass
    ``config`` holding another value: for configs built in Python (``__post_init__``), which :func:`from_dict` does
    not see."""
    for name, choices in _choice_fields(type(config)).items():
        value = getattr(config, name)
        if value not in choices:
            raise choice_error(f"{section}.{name}".lstrip("."), value, choices)


def load_file(path: str | Path) -> dict:
    """A TOML (``.toml``), YAML (``.yaml``/``.yml``) or JSON file as a dict. A UTF-8 byte order mark at the start is
    accepted and dropped (TOML forbids it, but Windows editors write it); a file that does not parse raises ValueError
    in one line naming the file, the line and column, and the parser's complaint."""
    path = Path(path)
    if path.suffix not in (".toml", ".yaml", ".yml", ".json"):
        raise ValueError(f"config file {path} must end in .toml, .yaml, .yml or .json")
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as error:
        raise ValueError(f"config file {path} is not UTF-8 text (byte {error.start}): save it as UTF-8") from None
    if path.suffix == ".toml":
        import tomllib
        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as error:
            raise ValueError(f"{path}: not valid TOML: {error}") from None
    if path.suffix == ".json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError(f"{path}:{error.lineno}:{error.colno}: not valid JSON: {error.msg}") from None
    import yaml
    try:
        return yaml.safe_load(text) or {}
    except yaml.YAMLError as error:
        raise ValueError(_yaml_error(path, error)) from None


def _yaml_error(path: Path, error) -> str:
    """PyYAML's several-line message (with source excerpts and carets) as ``path:line:column: not valid YAML: ...``."""
    mark = getattr(error, "problem_mark", None)
    where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
    problem = getattr(error, "problem", None) or str(error).splitlines()[0]
    context = getattr(error, "context", None)
    return f"{where}: not valid YAML: {problem}" + (f" ({context})" if context else "")


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
