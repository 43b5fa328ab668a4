"""The tool_use suite's verifier: the right number, reached through the lookup tool.

``score(row, response)`` gets the dataset row and the final response in OpenAI Responses API shape,
whose ``output`` holds every item of the rollout in order: the model's ``function_call`` items, the
agent's ``function_call_output`` items and the final assistant ``message``.

Reward 1.0 when both hold, else 0.0:

* the last ``\\boxed{...}`` of the final message equals ``expected_answer``;
* every key in ``required_lookups`` was passed to ``lookup`` and that call got an output that is
  not an error, i.e. the facts came from the tool, not from a guess.

The calculator is not required: doing the arithmetic unaided is allowed if it is right. Extra
fields in the result row say what happened: ``extracted_answer``, ``tool_calls``,
``used_calculator`` and ``missing_lookups``.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pytest_rollouts import output_text

BOXED_RE = re.compile(r"\\boxed\{([^{}]*)\}")


def _items(response: Any) -> list[dict[str, Any]]:
    output = response.get("output") if isinstance(response, dict) else None
    return [item for item in output if isinstance(item, dict)] if isinstance(output, list) else []


def _lookup_key(arguments: Any) -> str | None:
    try:
        key = json.loads(arguments).get("key") if isinstance(arguments, str) else None
    except (ValueError, AttributeError):
        return None
    return key.strip().lower() if isinstance(key, str) else None


def score(row: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
    items = _items(response)
    outputs = {item.get("call_id"): item.get("output") for item in items if item.get("type") == "function_call_output"}
    calls = [item for item in items if item.get("type") == "function_call"]
    looked_up = set()
    for call in calls:
        output = outputs.get(call.get("call_id"))
        if call.get("name") == "lookup" and isinstance(output, str) and not output.startswith("error"):
            key = _lookup_key(call.get("arguments"))
            if key is not None:
                looked_up.add(key)
    missing = sorted({str(k).lower() for k in row.get("required_lookups", [])} - looked_up)
    boxed = BOXED_RE.findall(output_text(response))
    extracted = boxed[-1].strip().replace(",", "") if boxed else None
    correct = extracted is not None and extracted == str(row.get("expected_answer", "")).strip()
    return {
        "reward": 1.0 if correct and not missing else 0.0,
        "extracted_answer": extracted,
        "tool_calls": len(calls),
        "used_calculator": any(call.get("name") == "calculator" for call in calls),
        "missing_lookups": missing,
    }
