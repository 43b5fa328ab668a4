"""The pieces the settings model is made of: an option's field (default and description from the
option table, bounds from the model), the bounds a run can use, and the ``KEY=VALUE`` entries of
keyed options. Apart from ``settings.py``, which holds the model and its checks."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
from pydantic import Field

from pytest_rollouts.options import OPTION


def pairs(values: Any, what: str) -> list[tuple[str, str]]:
    """``KEY=VALUE`` items of a repeatable option (also comma- or newline-free ini lines)."""
    out = []
    for item in values if isinstance(values, (list, tuple)) else [values]:
        key, sep, value = str(item).partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{what} entries look like KEY=VALUE, got {item!r}")
        out.append((key.strip(), value.strip()))
    return out


def given_pairs(value: Any, what: str) -> list[tuple[str, Any]]:
    """A keyed option's ``(key, value)`` items, from a mapping or from ``KEY=VALUE`` items."""
    if isinstance(value, Mapping):
        return [(str(key).strip(), item) for key, item in value.items()]
    return pairs(value, what)


def option_field(name: str, **bounds: Any) -> Any:
    """The field of option ``name``: its default and description from the option table, ``bounds``
    (pydantic's ``ge``, ``le``, ...) from the model, which alone knows the value's type. pydantic
    copies a mutable default (``{}``) for each model, so no two runs share one."""
    entry = OPTION[name]
    return Field(entry.default, description=entry.described, **bounds)


def comma_separated(values: list[Any] | tuple[Any, ...]) -> frozenset[str]:
    """Names given as repeated values, each of which may hold several separated by commas."""
    return frozenset(part.strip() for item in values for part in str(item).split(",") if part.strip())


def json_object(text: str) -> dict[str, Any]:
    """A JSON object given as text (an option's value), or ``ValueError`` saying what is wrong."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc})") from None
    if not isinstance(value, dict):
        raise ValueError("must be a JSON object")
    return value


def need_gate(scored_only: bool, max_regression: float | None, scored_only_name: str, gate_name: str) -> None:
    """``--gate-scored-only`` says how ``--max-regression`` judges: alone it would do nothing, unsaid.
    One rule for a run's settings and ``compare``, each naming the options its own way."""
    if scored_only and max_regression is None:
        raise ValueError(f"{scored_only_name} says how {gate_name} judges: give it DELTA")
