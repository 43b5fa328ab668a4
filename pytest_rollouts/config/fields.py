"""The pieces the settings model is made of: an option's field (default and description from the
option table, bounds from the model), the bounds a run can use, the failure limit's field type, and
the ``KEY=VALUE`` entries of keyed options. Apart from ``settings.py``, which holds the model and its checks."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

import orjson
from pydantic import BeforeValidator, Field, ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError

from pytest_rollouts.config.bounds import MAX_REPEATS
from pytest_rollouts.config.values import FailureLimit, not_utf8_why
from pytest_rollouts.options import OPTION

# ``--rollouts-max-failures``'s field type: its text parsed before pydantic checks it is a ``FailureLimit``.
MaxFailures = Annotated[FailureLimit | None, BeforeValidator(FailureLimit.parse)]


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


def repeats_value(value: Any) -> Any:
    """``N``, or NeMo Gym's per-agent ``agent=N,_default=M``; an unlisted agent gets ``_default``, else 1."""
    if isinstance(value, str) and "=" in value:
        parts = [p for p in value.split(",") if p.strip()]
        by_agent: dict[str, Any] = {}
        for key, count in pairs(parts, "--rollouts-repeats"):
            if key in by_agent:
                raise ValueError(f"agent {key!r} is given twice")
            by_agent[key] = count
        value = by_agent
    if isinstance(value, dict):
        for key, count in value.items():
            if not str(count).strip().isdigit() or not 1 <= int(count) <= MAX_REPEATS:
                raise ValueError(f"repeats for {key!r} must be a whole number from 1 to {MAX_REPEATS}, got {count!r}")
        return {str(k): int(v) for k, v in value.items()}
    if isinstance(value, str):
        try:
            value = int(value)
        except ValueError:
            raise ValueError("must be N or AGENT=N[,AGENT=N...] (e.g. 4, or judge=3,_default=1)") from None
    if isinstance(value, int) and not 1 <= value <= MAX_REPEATS:
        raise ValueError(f"must be from 1 to {MAX_REPEATS}")
    return value


def agent_map_value(value: Any) -> Any:
    """``KEY=AGENT`` items (the option), or a mapping (the Python API): the same checks for both."""
    pairs = given_pairs(value, "--rollouts-agent-map")
    mapping: dict[str, str] = {}
    for key, target in pairs:
        if not isinstance(target, str):
            raise ValueError(f"{key} must map to an agent name, got {target!r}")
        if not target.strip():
            raise ValueError(f"{key}= maps to no agent")
        if mapping.setdefault(key, target.strip()) != target.strip():
            raise ValueError(f"{key} is mapped twice ({mapping[key]} and {target})")
    return mapping


def fan_out_value(value: Any) -> Any:
    """``KEY=A,B`` items (the option), or a mapping of keys to lists of agents (the Python API,
    where a string is read as the option reads it): the same checks for both."""
    fan: dict[str, tuple[str, ...]] = {}
    for key, listed in given_pairs(value, "--rollouts-fan-out"):
        names = listed.split(",") if isinstance(listed, str) else list(listed)
        if not all(isinstance(name, str) for name in names):
            raise ValueError(f"fan-out of {key} must list agent names, got {listed!r}")
        agents = tuple(name.strip() for name in names)
        if not agents or agents == ("",):
            raise ValueError(f"fan-out of {key} lists no agents")
        if "" in agents:
            raise ValueError(f"fan-out of {key} has an empty agent name ({listed!r})")
        doubled = sorted({a for a in agents if agents.count(a) > 1})
        if doubled:
            raise ValueError(f"fan-out of {key} lists {', '.join(doubled)} more than once")
        if key in fan:
            raise ValueError(f"fan-out of {key} is given twice")
        fan[key] = agents
    return fan


def utf8_given(model: type, data: Any) -> Any:
    """The settings model's check that every name and path given is text, before any field reads it:
    one pass over what was given, where a validator on every field would be built into each one's
    schema (sixty of them) at every start. A value that is not is an error of its field, worded as a
    field's own ``ValueError`` is (``errors.describe_errors`` reads them alike)."""
    if not isinstance(data, Mapping):
        return data
    errors = [
        InitErrorDetails(
            type=PydanticCustomError("value_error", "Value error, {why}", {"why": why}), loc=(key,), input=value
        )
        for key, value in data.items()
        if (why := not_utf8_why(value))
    ]
    if errors:
        raise ValidationError.from_exception_data(model.__name__, errors)
    return data
