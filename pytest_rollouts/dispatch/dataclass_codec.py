"""Dataclasses over JSON by field name: how a dispatcher message's type is written and checked.

A type is resolved once, on first use, into an encoder and a builder: the per-message cost is a key
comparison and a constructor. A field one side adds and the other does not know is a ``Mismatch``
naming its place, never a value read into the wrong field. A list of flat dataclasses (a task's
outcomes) goes as a table whose columns are named once.
"""

from __future__ import annotations

import dataclasses
import inspect
import itertools
import operator
import sys
import types
import typing
from collections.abc import Callable
from typing import Any, Union

from pytest_rollouts.datatype import tuple_getter


class Mismatch(Exception):
    """Raised where fields differ; each level it passes on the way out prepends its place to ``path``,
    so a message that decodes cleanly spends nothing on naming places."""

    def __init__(self, said: str) -> None:
        super().__init__(said)
        self.said = said
        self.path = ""


Builder = Callable[[Any], Any]


def _field_types(cls: type) -> dict[str, Any]:
    """Each field's type: its annotation, evaluated in its module if postponed (a string, under
    ``from __future__ import annotations``), all of them in one ``eval``.

    ``typing.get_type_hints`` compiles each annotation on its own, which was most of what resolving
    a message type cost (a plan header's 27 fields: 0.5 ms, against 0.1 ms in one expression). A
    field annotated in a base class, or a quoted name inside an annotation (``list["Inner"]``, which
    one ``eval`` leaves a string), is left to it.
    """
    own = inspect.get_annotations(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    postponed = [name for name in names if isinstance(own.get(name), str)]
    if any(name not in own for name in names) or any(quote in own[name] for name in postponed for quote in "'\""):
        return typing.get_type_hints(cls)
    expression = "(" + "".join(f"{own[name]}," for name in postponed) + ")"
    evaluated = eval(expression, vars(sys.modules[cls.__module__]), dict(vars(cls))) if postponed else ()
    return {name: own[name] for name in names} | dict(zip(postponed, evaluated, strict=True))


def encoder(cls: type) -> Callable[[Any], Any]:
    """What ``cls`` goes over the pipe as: itself (orjson writes a dataclass by field name), except
    that a list of flat dataclasses goes as a table, its field names once and a list of values
    per element (a task's outcomes: their names written and read once, not once per rollout)."""
    names = [f.name for f in dataclasses.fields(cls)]
    hints = _field_types(cls)
    tables = [(name, _table_columns(element)) for name in names if (element := _flat_element(hints[name])) is not None]
    if not tables:
        return lambda msg: msg
    values_of = tuple_getter(operator.attrgetter, names)

    def fields_of(msg: Any) -> dict[str, Any]:
        fields = dict(zip(names, values_of(msg), strict=True))  # in C: a comprehension is one more call
        for name, (columns, values) in tables:
            fields[name] = {"fields": columns, "rows": list(map(values, fields[name]))}
        return fields

    return fields_of


def _flat_element(hint: Any) -> type | None:
    """The element type of a list of dataclasses none of whose fields holds another dataclass."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) is not list or not args or not dataclasses.is_dataclass(args[0]):
        return None
    element: type = args[0]  # type: ignore[assignment]
    inner = _field_types(element).values()
    return None if any(_nested(hint) is not None for hint in inner) else element


def _table_columns(cls: type) -> tuple[list[str], Callable[[Any], tuple[Any, ...]]]:
    """``cls``'s field names, and a getter of an instance's values in that order (one C call)."""
    names = [f.name for f in dataclasses.fields(cls)]
    return names, tuple_getter(operator.attrgetter, names)


def builder(cls: type) -> Builder:
    """Check a JSON object's keys against ``cls``'s fields, then build it (nested dataclasses too).

    Resolved once per type: the per-message cost is a key comparison and a constructor.
    """
    hints = _field_types(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    expected = frozenset(names)
    nested = tuple((name, sub) for name in names if (sub := _nested(hints[name])) is not None)
    # Positional, in field order: keyword arguments cost a frozen dataclass twice as much to take.
    values_of = tuple_getter(operator.itemgetter, names)

    def build(fields: Any) -> Any:
        if type(fields) is not dict or fields.keys() != expected:
            raise Mismatch(_differences(fields, expected))
        for name, sub in nested:
            try:
                fields[name] = sub(fields[name])
            except Mismatch as exc:
                exc.path = f".{name}{exc.path}"
                raise
        return cls(*values_of(fields))

    return build


def _differences(fields: Any, expected: frozenset[str]) -> str:
    if type(fields) is not dict:
        return f"a JSON {type(fields).__name__} where its fields belong"
    said = [f"field {name!r} its type does not define" for name in sorted(fields.keys() - expected)]
    said += [f"no field {name!r}" for name in sorted(expected - fields.keys())]
    return " and ".join(said)


def _nested(hint: Any) -> Builder | None:
    """A builder for a field that holds dataclasses (one, a list or a dict of them, or one or None)."""
    if dataclasses.is_dataclass(hint):
        return builder(hint)  # type: ignore[arg-type]
    args = typing.get_args(hint)
    origin = typing.get_origin(hint)
    if origin is list and args and dataclasses.is_dataclass(args[0]):
        flat = _flat_element(hint)
        return _list_builder(builder(args[0])) if flat is None else _table_builder(flat)  # type: ignore[arg-type]
    if origin is dict and len(args) == 2 and dataclasses.is_dataclass(args[1]):
        return _dict_builder(builder(args[1]))  # type: ignore[arg-type]
    if origin in (Union, types.UnionType) and type(None) in args:
        inner = [arg for arg in args if arg is not type(None)]
        if len(inner) == 1 and dataclasses.is_dataclass(inner[0]):
            one = builder(inner[0])  # type: ignore[arg-type]
            return lambda value: None if value is None else one(value)
    return None


def _dict_builder(item: Builder) -> Builder:
    def build(values: Any) -> dict[str, Any]:
        if type(values) is not dict:
            raise Mismatch(f"a JSON {type(values).__name__} where an object belongs")
        return {key: item(value) for key, value in values.items()}

    return build


def _table_builder(cls: type) -> Builder:
    """A table's rows back into ``cls``: its columns checked once against ``cls``'s fields, by name,
    then each row's values passed in that order."""
    names = [f.name for f in dataclasses.fields(cls)]
    expected = frozenset(names)

    def build(table: Any) -> list[Any]:
        if type(table) is not dict or table.keys() != _TABLE_KEYS:
            raise Mismatch(_differences(table, _TABLE_KEYS))
        if table["fields"] != names:
            columns = table["fields"]
            if type(columns) is list and set(columns) == expected:
                raise Mismatch(f"its fields in the order {columns}")
            raise Mismatch(_differences(dict.fromkeys(columns) if type(columns) is list else columns, expected))
        try:
            return list(itertools.starmap(cls, table["rows"]))
        except TypeError:
            raise Mismatch(f"a row that is not {len(names)} values") from None

    return build


_TABLE_KEYS = frozenset(("fields", "rows"))


def _list_builder(item: Builder) -> Builder:
    def build(values: Any) -> list[Any]:
        if type(values) is not list:
            raise Mismatch(f"a JSON {type(values).__name__} where a list belongs")
        built = []
        for index, value in enumerate(values):
            try:
                built.append(item(value))
            except Mismatch as exc:
                exc.path = f"[{index}]{exc.path}"
                raise
        return built

    return build
