"""A dispatched operator call's arguments by their schema names, for the ``TorchDispatchMode`` recorders of the
tests: the schema's defaults, then the positional arguments, then the keyword ones."""

from __future__ import annotations


def bound_arguments(func, args: tuple, kwargs: dict | None) -> dict:
    """``{name: value}`` of every argument of the call of ``func`` (an ``OpOverload``), defaults included."""
    schema = func._schema.arguments
    defaults = {a.name: a.default_value for a in schema if a.has_default_value()}
    return {**defaults, **dict(zip((a.name for a in schema), args)), **(kwargs or {})}
