"""``config_io``: a ``Literal`` field takes only its choices, wherever it sits (nested dataclass, list, dict value,
``Optional``), through ``from_dict`` (TOML-like dicts, ``--set`` overrides) and through ``check_choices`` (configs built
in Python); the error names the dotted key, the value and the choices."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Optional

import pytest

from mma_nmt.config_io import apply_overrides, check_choices, from_dict

Colour = Literal["red", "green", "blue"]


@dataclass
class Inner:
    colour: Colour = "red"
    mode: Literal["on", "off"] = "on"
    maybe: Optional[Literal["x"]] = None

    def __post_init__(self):
        check_choices("outer.inner", self)


@dataclass
class Outer:
    name: str
    inner: Inner = field(default_factory=Inner)
    palette: list[Colour] = field(default_factory=list)
    by_row: dict[str, Colour] = field(default_factory=dict)


def test_from_dict_accepts_the_choices_and_converts_nested_values():
    outer = from_dict(Outer, {"name": "a", "inner": {"colour": "blue", "maybe": "x"}, "palette": ["green"],
                              "by_row": {"r": "red"}}, "outer")
    assert outer == Outer("a", Inner("blue", "on", "x"), ["green"], {"r": "red"})
    assert from_dict(Outer, {"name": "a", "inner": {"maybe": None}}, "outer").inner.maybe is None


@pytest.mark.parametrize("data, message", [
    ({"name": "a", "inner": {"colour": "mauve"}}, "outer.inner.colour must be one of ['blue', 'green', 'red'], got "
                                                  "'mauve'"),
    ({"name": "a", "inner": {"mode": "auto"}}, "outer.inner.mode must be 'off' or 'on', got 'auto'"),
    ({"name": "a", "inner": {"maybe": "y"}}, "outer.inner.maybe must be 'x', got 'y'"),
    ({"name": "a", "palette": ["red", "pink"]}, "outer.palette must be one of ['blue', 'green', 'red'], got 'pink'"),
    ({"name": "a", "by_row": {"r": "pink"}}, "outer.by_row.r must be one of ['blue', 'green', 'red'], got 'pink'"),
    ({"name": "a", "by_row": ["red"]}, "outer.by_row must be a table/mapping, got ['red']"),
    ({"inner": {}}, "outer is missing key(s) ['name']"),
])
def test_from_dict_names_the_key_the_value_and_the_choices(data, message):
    with pytest.raises(ValueError) as raised:
        from_dict(Outer, data, "outer")
    assert str(raised.value) == message


def test_a_dotted_override_outside_the_choices_is_refused():
    data = apply_overrides({"name": "a"}, ["inner.colour=mauve"])
    with pytest.raises(ValueError, match=r"^outer.inner.colour must be one of \['blue', 'green', 'red'\], got 'mauve'$"):
        from_dict(Outer, data, "outer")


def test_check_choices_guards_configs_built_in_python():
    with pytest.raises(ValueError, match=r"^outer.inner.mode must be 'off' or 'on', got 'auto'$"):
        Inner(mode="auto")
    with pytest.raises(ValueError, match=r"^outer.inner.maybe must be 'x' or None, got 'y'$"):
        Inner(maybe="y")
    assert Inner(colour="green", maybe=None).colour == "green"
