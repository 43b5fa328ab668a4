"""Helpers for the shipped suites' tests: the seeded baseline model on a local port, the suites'
files loaded by path, and a hand-rolled tool-call loop.

The loop is deliberately small and independent of pytest-rollouts' built-in model agent: it
drives the baseline through the official ``openai`` client, runs the suite's tools, and hands the
verifier the whole rollout's output items in Responses API shape, which is the contract the
built-in agent keeps. It checks the suites and the baseline, not the agent.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import sys
import tomllib
from pathlib import Path
from types import ModuleType
from typing import Any

import openai
from aiohttp import web
from openai.types.chat import ChatCompletion
from openai.types.responses import Response

from .agents import AppServer

REPO = Path(__file__).resolve().parent.parent
EVALSUITES = REPO / "evalsuites"
SUITES = ("arithmetic", "tool_use", "structured")
ROLLOUT_HEADER = "X-Rollouts-Rollout"


def load(path: Path) -> ModuleType:
    """A suite's Python file as a module, loaded by path as the plugin loads it."""
    name = f"_suite_{path.parent.name}_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # as the plugin does: dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


class BaselineModel(AppServer):
    """``evalsuites/baseline_model.py``'s app on 127.0.0.1, an ephemeral port, its own thread."""

    def __init__(self) -> None:
        self.app = load(EVALSUITES / "baseline_model.py").make_app()
        super().__init__()

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    def _app(self) -> web.Application:
        return self.app


class Suite:
    """One suite's declaration, data, verifier and tools."""

    def __init__(self, name: str) -> None:
        self.dir = EVALSUITES / name
        config = tomllib.loads((self.dir / "rollouts.toml").read_text())
        self.agent = config["agents"][config["agent"]]
        self.rows = [json.loads(line) for line in (self.dir / "data.jsonl").read_text().splitlines()]
        file, func = self.agent["verifier"].split(":")
        self.score = getattr(load(self.dir / file), func)
        self.tools: dict[str, Any] = {}
        if "tools" in self.agent:
            file, attr = self.agent["tools"].split(":")
            self.tools = {f.__name__: f for f in getattr(load(self.dir / file), attr)}


def parameters(func: Any) -> dict[str, Any]:
    """A minimal JSON schema of a tool's parameters (str/int/float/bool), enough for the test."""
    types = {str: "string", int: "integer", float: "number", bool: "boolean", "str": "string", "int": "integer"}
    params = inspect.signature(func).parameters
    return {
        "type": "object",
        "properties": {name: {"type": types.get(p.annotation, "string")} for name, p in params.items()},
        "required": list(params),
    }


def description(func: Any) -> str:
    return (inspect.getdoc(func) or "").split("\n\n")[0]


def run_tool(tools: dict[str, Any], name: str, arguments: str) -> str:
    if name not in tools:
        return f"error: no tool named {name!r}"
    try:
        return str(tools[name](**json.loads(arguments)))
    except (ValueError, TypeError) as exc:
        return f"error: {exc}"


def user_text(row: dict[str, Any]) -> str:
    return "\n".join(part["text"] for item in row["responses_create_params"]["input"] for part in item["content"])


def rollout(client: openai.OpenAI, suite: Suite, row: dict[str, Any], task: int, repeat: int) -> dict[str, Any]:
    """One rollout by hand: model call, tool calls run, next call..., then the final response in
    Responses API shape with every output item of every turn, as the built-in agent hands it on.

    Each call is the client's ``post`` of the request body as ``create`` builds it: ``create`` only
    adds a walk of the plain dicts given against its parameter types (a third of a pass's time, and
    nothing it changes here); its calls are ``test_baseline_model.py``'s."""
    options: openai.RequestOptions = {"headers": {ROLLOUT_HEADER: f"{task}.{repeat}"}}
    output: list[dict[str, Any]] = []
    usage = {"input_tokens": 0, "output_tokens": 0, "total_tokens": 0}
    last: dict[str, Any] = {}
    if suite.agent["api"] == "chat":
        messages: list[dict[str, Any]] = [{"role": "user", "content": user_text(row)}]
        tools = [
            {"type": "function", "function": {"name": n, "description": description(f), "parameters": parameters(f)}}
            for n, f in suite.tools.items()
        ]
        for _ in range(suite.agent.get("max_turns", 1)):
            extra = {"tools": tools} if tools else {}
            body = {"model": suite.agent["model_name"], "messages": messages, **extra}
            completion = client.post("/chat/completions", body=body, cast_to=ChatCompletion, options=options)
            last = completion.model_dump()
            assert completion.usage is not None
            usage["input_tokens"] += completion.usage.prompt_tokens
            usage["output_tokens"] += completion.usage.completion_tokens
            message = completion.choices[0].message
            if not message.tool_calls:
                text = message.content or ""
                output.append(
                    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}
                )
                break
            messages.append(message.model_dump(exclude_none=True))
            for call in message.tool_calls:
                result = run_tool(suite.tools, call.function.name, call.function.arguments)
                output.append(
                    {
                        "type": "function_call",
                        "call_id": call.id,
                        "name": call.function.name,
                        "arguments": call.function.arguments,
                    }
                )
                output.append({"type": "function_call_output", "call_id": call.id, "output": result})
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    else:
        items: list[dict[str, Any]] = list(row["responses_create_params"]["input"])
        tools = [
            {"type": "function", "name": n, "description": description(f), "parameters": parameters(f), "strict": False}
            for n, f in suite.tools.items()
        ]
        for _ in range(suite.agent.get("max_turns", 1)):
            extra = {"tools": tools} if tools else {}
            body = {"model": suite.agent["model_name"], "input": items, **extra}
            response = client.post("/responses", body=body, cast_to=Response, options=options)
            last = response.model_dump()
            assert response.usage is not None
            usage["input_tokens"] += response.usage.input_tokens
            usage["output_tokens"] += response.usage.output_tokens
            calls = [item for item in response.output if item.type == "function_call"]
            for item in response.output:
                output.append(item.model_dump(exclude_none=True))
                items.append(item.model_dump(exclude_none=True))
            if not calls:
                break
            for call in calls:
                result = run_tool(suite.tools, call.name, call.arguments)
                item = {"type": "function_call_output", "call_id": call.call_id, "output": result}
                output.append(item)
                items.append(item)
    usage["total_tokens"] = usage["input_tokens"] + usage["output_tokens"]
    return {"id": last.get("id"), "object": "response", "model": last.get("model"), "output": output, "usage": usage}


def rewards(base_url: str, suite: Suite, repeat: int = 0) -> list[float]:
    """Every task of the suite, one rollout each (rollout index ``repeat``), scored."""
    client = openai.OpenAI(base_url=base_url, api_key="x", max_retries=0)
    scores = []
    for task, row in enumerate(suite.rows):
        result = suite.score(row, rollout(client, suite, row, task, repeat))
        scores.append(float(result["reward"] if isinstance(result, dict) else result))
    return scores
