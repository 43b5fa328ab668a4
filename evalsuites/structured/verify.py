"""The structured suite's verifier: a JSON object checked against the row's JSON Schema, with
credit per field.

``score(row, response)`` reads the final assistant message of ``response`` (OpenAI Responses API
shape), takes the JSON object in it (a ```json fence around it is tolerated) and scores each field
of the row's ``expected``: 1 when the field is present, valid under its own subschema and equal to
the expected value (``interests`` in any order), else 0. The reward is the mean over the fields,
so one slip in six costs 1/6. A reply that holds no JSON object scores 0.

Extra fields in the result row: ``valid_json``, ``schema_valid`` (the whole object against the
whole schema, e.g. no extra properties) and ``field_credit`` (field -> 0 or 1).

Uses ``jsonschema`` for the validation.
"""

from __future__ import annotations

import json
import math
from typing import Any

from jsonschema import Draft202012Validator

from pytest_rollouts import output_text

UNORDERED = frozenset({"interests"})


def parse_object(text: str) -> dict[str, Any] | None:
    """The JSON object in ``text``: from its first ``{`` to its last ``}``, so prose or a code
    fence around it does not matter; None when there is no parseable object."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        return None
    try:
        value = json.loads(text[start : end + 1])
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _same(field: str, got: Any, want: Any) -> bool:
    if field in UNORDERED and isinstance(got, list) and isinstance(want, list):
        return sorted(map(str, got)) == sorted(map(str, want)) and len(set(map(str, got))) == len(got)
    if isinstance(want, bool) or isinstance(got, bool):
        return got is want
    if isinstance(want, int | float) and isinstance(got, int | float):
        return math.isclose(got, want, rel_tol=0, abs_tol=1e-9)
    return got == want


def score(row: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
    schema, expected = row.get("schema") or {}, row.get("expected") or {}
    obj = parse_object(output_text(response))
    if obj is None:
        credit = dict.fromkeys(expected, 0)
        return {"reward": 0.0, "valid_json": False, "schema_valid": False, "field_credit": credit}
    properties = schema.get("properties", {})
    credit = {}
    for field, want in expected.items():
        ok = field in obj and Draft202012Validator(properties.get(field, {})).is_valid(obj[field])
        credit[field] = int(ok and _same(field, obj[field], want))
    return {
        "reward": sum(credit.values()) / len(credit) if credit else 0.0,
        "valid_json": True,
        "schema_valid": Draft202012Validator(schema).is_valid(obj),
        "field_credit": credit,
    }
