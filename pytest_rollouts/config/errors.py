"""Settings errors in a user's words: each names where the value came from (an option, an ini
key, a config field), says what is wrong without pydantic's phrasing, and never shows a secret."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from pytest_rollouts.config.values import beyond_float
from pytest_rollouts.net.address import without_password


def describe_errors(exc: ValidationError, source: Mapping[str, str]) -> str:
    lines = ["invalid rollouts settings:"]
    for error in exc.errors():
        field = str(error["loc"][0]) if error["loc"] else ""
        where = source.get(field, field) or "options"
        # A missing field's "input" is every other value given: nothing of it says what is missing.
        shown = field not in ("agent_header", "") and error["type"] != "missing"
        message = _in_words(error)
        value = repr(shown_value(error.get("input")))
        given = f" (got {value})" if shown and value not in message else ""
        lines.append(f"  {where}: {message}{given}")
    return "\n".join(lines)


# pydantic's words for a bound or a type, as an option's user reads them.
BOUND_WORDS = {
    "greater_than_equal": "must be at least {ge}",
    "greater_than": "must be more than {gt}",
    "less_than_equal": "must be at most {le}",
    "less_than": "must be less than {lt}",
    "int_parsing": "must be a whole number",
    "int_from_float": "must be a whole number",
    "float_parsing": "must be a number",
    "bool_parsing": "must be true or false",
    "finite_number": "must be a finite number",
}


def _in_words(error: Any) -> str:
    words = BOUND_WORDS.get(error["type"])
    if words is not None:
        return words.format(**error.get("ctx", {})) + (
            beyond_float(error.get("input")) if error["type"] == "finite_number" else ""
        )
    return str(error["msg"]).removeprefix("Value error, ")


def shown_value(value: Any) -> Any:
    """A value given, fit for a message: a header's value is a secret and never shown, nor a URL's
    password, wherever either sits (``judge=http://u:pw@host``, inside a mapping or a list)."""
    if isinstance(value, str):
        return without_password(value)
    if isinstance(value, Mapping):
        return {k: "(not shown)" if k == "agent_header" else shown_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [shown_value(v) for v in value]
    return value
