"""One rollout as the report shows it: the prompt, each output item, the verifier's fields and the
failure, as short display text.

A report of 100k rollouts must stay a file a browser opens, so every text is capped at
``TEXT_CAP`` characters with a visible marker saying how much was cut, and every value that is
not a string is shown as its JSON. Nothing here is HTML: the page inserts all of it as text.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from pytest_rollouts.rows.schema import (
    COLLECTOR_PREFIX,
    CREATE_PARAMS,
    EARLIER_TRIES,
    ELAPSED,
    FAILURE_CLASS,
    FAILURE_HTTP_STATUS,
    FAILURE_MESSAGE,
    FAILURE_RESPONSE_BODY,
    FAILURE_TYPE,
)
from pytest_rollouts.store.jsonl import dumps

# Characters kept of any one text (a prompt message, an answer, a tool call's arguments, a field).
TEXT_CAP = 2000
# Of the answer shown in the table's own column.
SNIPPET_CAP = 120
# Fields of a result row that are the collector's or shown on their own, not the verifier's.
NOT_VERIFIER = frozenset({"response", "agent_ref", ELAPSED, CREATE_PARAMS})


def capped(text: str, cap: int = TEXT_CAP) -> str:
    """``text``, or its first ``cap`` characters and a marker saying what was cut."""
    if len(text) <= cap:
        return text
    return f"{text[:cap]} … [truncated: {cap:,} of {len(text):,} characters shown]"


def shown(value: Any, cap: int = TEXT_CAP) -> str:
    """A value as display text: a string as it is, anything else as JSON (NaN as the files have it)."""
    if isinstance(value, str):
        return capped(value, cap)
    if value is None or isinstance(value, bool):
        return "null" if value is None else "true" if value else "false"
    if type(value) in (int, float):  # most verifier fields: as JSON writes them, without its call
        return repr(value)
    return capped(dumps(value, default=str).decode(), cap)


def number(value: Any) -> float | None:
    """A finite number for the page's JSON (which has no NaN), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def prompt_of(row: Mapping[str, Any]) -> list[list[str]]:
    """The request's ``instructions`` and ``input`` as ``[role, text]`` messages."""
    params = row.get(CREATE_PARAMS)
    if not isinstance(params, Mapping):
        return []
    messages = []
    if params.get("instructions"):
        messages.append(["instructions", shown(params["instructions"])])
    given = params.get("input")
    if isinstance(given, str):
        return [*messages, ["user", capped(given)]]
    if not isinstance(given, list):  # a number, an object, null: what the agent was sent, as JSON
        return [*messages, ["input", shown(given)]]
    for item in given:
        if isinstance(item, Mapping) and "role" in item:
            messages.append([str(item["role"]), capped(_content_text(item.get("content")))])
        else:  # a function call or its output replayed in the input
            messages.append([str(item.get("type", "item")) if isinstance(item, Mapping) else "item", shown(item)])
    return messages


def task_fields(row: Mapping[str, Any]) -> list[list[str]]:
    """A materialized row's dataset fields (``expected_answer``, a label), without the request and stamps."""
    return [
        [name, shown(value)]
        for name, value in row.items()
        if name not in (CREATE_PARAMS, "agent_ref") and not name.startswith(COLLECTOR_PREFIX)
    ]


def output_items(response: Any) -> list[list[str]]:
    """A Responses-shaped ``response``'s output in order, each item ``[kind, label, text]``:
    ``message`` (its role, its text), ``call`` (the tool's name, its arguments), ``result`` (the
    call id, the tool's output), ``reasoning``, or the item's type with its JSON. Any other
    ``response`` (a chat completion, a string, an ``output`` that is no list) is one ``raw`` item,
    its pretty JSON: what the agent returned is shown even when it is not the shape read here."""
    output = response.get("output") if isinstance(response, Mapping) else None
    if response is None:
        return []
    if not isinstance(output, list):
        return [["raw", "", capped(_raw(response))]]
    items = []
    for item in output:
        if not isinstance(item, Mapping):
            items.append(["item", "", shown(item)])
            continue
        kind = item.get("type")
        if kind == "message":
            items.append(["message", str(item.get("role", "assistant")), capped(_content_text(item.get("content")))])
        elif kind == "function_call":
            items.append(["call", str(item.get("name", "")), shown(item.get("arguments", ""))])
        elif kind == "function_call_output":
            items.append(["result", str(item.get("call_id", "")), shown(item.get("output", ""))])
        elif kind == "reasoning":
            parts = [_content_text(item.get(name)) for name in ("summary", "content")]
            items.append(["reasoning", "", capped("\n".join(part for part in parts if part))])
        else:
            items.append([str(kind or "item"), "", shown(dict(item))])
    return items


def final_answer(response: Any) -> str:
    """The whole text of the last message of a Responses-shaped ``response``, which is what a
    verifier reads; else any other ``response`` as it came, so the table shows what the agent
    returned. Uncut: the table's snippet is cut from it, so its marker says the answer's length."""
    if response is None:
        return ""
    output = response.get("output") if isinstance(response, Mapping) else None
    if not isinstance(output, list):
        return _raw(response)
    messages = (item for item in reversed(output) if isinstance(item, Mapping) and item.get("type") == "message")
    message = next(messages, None)
    return "" if message is None else _content_text(message.get("content"))


def verifier_fields(row: Mapping[str, Any]) -> list[list[str]]:
    """The result row's other top-level fields: the reward and what the verifier or agent added."""
    return [
        [name, shown(value)]
        for name, value in row.items()
        if name not in NOT_VERIFIER and not name.startswith(COLLECTOR_PREFIX)
    ]


def failure_of(row: Mapping[str, Any]) -> list[list[str]]:
    """A failure row's class, type, message, HTTP status, body and earlier tries, those present."""
    names = (FAILURE_CLASS, FAILURE_TYPE, FAILURE_MESSAGE, FAILURE_HTTP_STATUS, FAILURE_RESPONSE_BODY, ELAPSED)
    fields = [[name.removeprefix("_ng_failure_"), shown(row[name])] for name in names if row.get(name) is not None]
    if row.get(EARLIER_TRIES):
        fields.append(["earlier tries", shown(row[EARLIER_TRIES])])
    return fields


def _raw(response: Any) -> str:
    """A response of another shape as pretty JSON."""
    return json.dumps(response, indent=2, ensure_ascii=False, default=str)


def _content_text(content: Any) -> str:
    """The text parts of a message's content (``input_text``, ``output_text``, ``text``), joined."""
    if isinstance(content, str):
        return content
    parts = []
    for part in content if isinstance(content, list) else []:
        if isinstance(part, Mapping) and isinstance(part.get("text"), str):
            parts.append(part["text"])
        elif isinstance(part, Mapping) and part.get("type") == "refusal":
            parts.append(f"[refusal] {part.get('refusal', '')}")
        elif part is not None:
            parts.append(shown(part))
    return "\n".join(parts)
