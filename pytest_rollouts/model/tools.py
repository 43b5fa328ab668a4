"""A suite's tools: plain Python functions the model may call, described to it from their signatures.

Each function's JSON schema comes from its type hints (pydantic, imported only when a suite has
tools) and its description from its docstring's first paragraph. Whatever goes wrong inside a
call (an unknown name, arguments that are not JSON or do not fit, the function raising) goes
back to the model as the call's output: it is the model's turn to recover, not a failed rollout.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pytest_rollouts.datatype import datatype
from pytest_rollouts.store.jsonl import dumps, loads

# Plain ``def`` tools run in these threads, off the event loop: one that blocks (a lookup over the
# network, a sleep) would stall every rollout in flight, their timeouts and Ctrl-C included. Not
# asyncio's default executor, which a closing loop waits for: a tool that never returns keeps a
# thread, not the run.
TOOL_THREADS = ThreadPoolExecutor(max_workers=64, thread_name_prefix="rollouts-tool")


@datatype(frozen=True, slots=True)
class Tool:
    function: Callable[..., Any]
    # A plain ``def``: run in a thread of its own, since it may block (see ``TOOL_THREADS``).
    blocking: bool
    # Validates and converts the model's arguments (pydantic's validate_call).
    call: Callable[..., Any]
    schema: dict[str, Any]


class Toolbox:
    """Tools by name, and their schemas as a Responses request lists them."""

    def __init__(self, functions: list[Callable[..., Any]]) -> None:
        tools = [_tool(function) for function in functions]
        self._tools = {tool.schema["name"]: tool for tool in tools}
        self.schemas = [tool.schema for tool in self._tools.values()]

    async def call(self, name: str, arguments: str) -> str:
        """The text the model gets back for one call."""
        tool = self._tools.get(name)
        if tool is None:
            return f"error: no tool named {name!r}; the tools are {', '.join(self._tools) or 'none'}"
        try:
            parsed = loads((arguments or "{}").encode())
        except ValueError as exc:
            return f"error: the arguments are not valid JSON ({exc})"
        if not isinstance(parsed, dict):
            return "error: the arguments must be a JSON object"
        try:
            if tool.blocking:
                call = functools.partial(tool.call, **parsed)
                result = await asyncio.get_running_loop().run_in_executor(TOOL_THREADS, call)
            else:
                result = await tool.call(**parsed)
        except Exception as exc:  # the tool's own failure is the model's to handle
            return f"error: {type(exc).__name__}: {exc}"
        return result if isinstance(result, str) else dumps(result, default=str).decode()


def _tool(function: Callable[..., Any]) -> Tool:
    from pydantic import TypeAdapter, validate_call

    if not callable(function) or not hasattr(function, "__name__"):
        raise TypeError(f"a tool must be a function, not {function!r}")
    try:
        parameters = TypeAdapter(function).json_schema()
    except Exception as exc:  # pydantic's own errors are RuntimeErrors: say which tool, as a TypeError
        raise TypeError(f"tool {function.__name__!r}: no JSON schema from its signature ({exc})") from exc
    parameters.pop("title", None)
    parameters.setdefault("properties", {})
    parameters.pop("additionalProperties", None)
    doc = inspect.getdoc(function) or ""
    schema = {
        "type": "function",
        "name": function.__name__,
        "description": doc.split("\n\n", 1)[0].replace("\n", " ").strip(),
        "parameters": parameters,
    }
    return Tool(function, not inspect.iscoroutinefunction(function), validate_call(function), schema)
