"""A scriptable OpenAI-compatible model server for tests: real aiohttp on 127.0.0.1, in its own thread.

It serves ``/v1/chat/completions``, ``/v1/responses`` and ``/v1/models`` as OpenAI's API does,
and answers each call with what a ``behaviour`` returns for it (``agents.Reply``: JSON, raw
bytes, a hang-up, a delay). It records every call (route, body, headers), and its replies are
checked against the ``openai`` client's own types in ``model/test_model_wire.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from .agents import AppServer, Reply
from .helpers import write_rows

CHAT = "chat"
RESPONSES = "responses"


@dataclass(frozen=True)
class Call:
    """One call the model got: which API, its JSON body, its headers, and how many came before it."""

    api: str
    body: dict[str, Any]
    headers: dict[str, str]
    number: int


ModelBehaviour = Callable[[Call], Reply]


def chat_reply(
    text: str | None = None, calls: list[tuple[str, str, str]] = (), tokens: tuple[int, int] = (10, 5)
) -> dict[str, Any]:
    """A chat completion saying ``text`` and/or calling ``calls`` (id, name, JSON arguments)."""
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": a}} for i, n, a in calls
        ]
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "fake",
        "choices": [
            {"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop", "logprobs": None}
        ],
        "usage": {"prompt_tokens": tokens[0], "completion_tokens": tokens[1], "total_tokens": sum(tokens)},
    }


def responses_reply(
    text: str | None = None, calls: list[tuple[str, str, str]] = (), tokens: tuple[int, int] = (10, 5)
) -> dict[str, Any]:
    """A Responses object saying ``text`` and/or calling ``calls`` (call id, name, JSON arguments)."""
    output: list[dict[str, Any]] = []
    if text is not None:
        output.append(
            {
                "type": "message",
                "id": "msg_1",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        )
    output += [
        {"type": "function_call", "id": f"fc_{i}", "call_id": i, "name": n, "arguments": a, "status": "completed"}
        for i, n, a in calls
    ]
    return {
        "id": "resp_1",
        "object": "response",
        "created_at": 1700000000,
        "model": "fake",
        "status": "completed",
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": tokens[0],
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": tokens[1],
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": sum(tokens),
        },
    }


def last_user_text(call: Call) -> str:
    """The text of the last user message of a call, in either API's shape."""
    items = call.body["messages"] if call.api == CHAT else call.body["input"]
    if isinstance(items, str):
        return items
    for item in reversed(items):
        if item.get("role") == "user":
            content = item.get("content")
            if isinstance(content, str):
                return content
            return "".join(part.get("text", "") for part in content)
    return ""


def tool_outputs(call: Call) -> list[str]:
    """What the tools said so far in the conversation a call carries."""
    if call.api == CHAT:
        return [m["content"] for m in call.body["messages"] if m.get("role") == "tool"]
    return [i["output"] for i in call.body["input"] if isinstance(i, dict) and i.get("type") == "function_call_output"]


def reply_of(call: Call, text: str | None = None, calls: list[tuple[str, str, str]] = ()) -> Reply:
    """``text``/``calls`` in the shape of the call's API."""
    make = chat_reply if call.api == CHAT else responses_reply
    return Reply(json=make(text, calls))


def echo(call: Call) -> Reply:
    """Says the last user message back, after 'say '."""
    return reply_of(call, last_user_text(call).removeprefix("say "))


class FakeModel(AppServer):
    def __init__(self, behaviour: ModelBehaviour = echo) -> None:
        self.behaviour = behaviour
        self.calls: list[Call] = []
        # Requests to any other route (a /health, an /aggregate_metrics), which a model never gets.
        self.elsewhere: list[str] = []
        self.in_flight = 0
        self.peak_in_flight = 0
        super().__init__()

    @property
    def base_url(self) -> str:
        return self.url + "/v1"

    def _app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/responses", self._responses)
        app.router.add_get("/v1/models", self._models)
        app.router.add_route("*", "/{tail:.*}", self._elsewhere)
        return app

    async def _elsewhere(self, request: web.Request) -> web.Response:
        self.elsewhere.append(f"{request.method} {request.path}")
        return web.Response(status=404)

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response(
            {"object": "list", "data": [{"id": "fake", "object": "model", "created": 0, "owned_by": "tests"}]}
        )

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._call(CHAT, request)

    async def _responses(self, request: web.Request) -> web.StreamResponse:
        return await self._call(RESPONSES, request)

    async def _call(self, api: str, request: web.Request) -> web.StreamResponse:
        call = Call(api, orjson.loads(await request.read()), dict(request.headers), len(self.calls))
        self.calls.append(call)
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            reply = self.behaviour(call)
            if reply.delay:
                await asyncio.sleep(reply.delay)
            if reply.reset:  # ``raw`` as the only bytes sent, then the connection closed
                assert request.transport is not None
                request.transport.write(reply.raw or b"")
                request.transport.close()
                return web.Response()
            body = reply.raw if reply.raw is not None else orjson.dumps(reply.json)
            return web.Response(
                status=reply.status, body=body, content_type="application/json", headers=dict(reply.headers)
            )
        finally:
            self.in_flight -= 1


VERIFY = """
from pytest_rollouts import output_text

def score(row, response):
    return 1.0 if output_text(response) == row["expected_answer"] else 0.0
"""


TOOLS = '''
def add(a: int, b: int) -> int:
    """Add two integers.

    Only the first paragraph is the description."""
    return a + b

async def fail(why: str) -> str:
    """Always raises."""
    raise RuntimeError(why)

TOOLS = [add, fail]
'''


def write_suite(
    root: Path, model_url: str, *, api: str = "chat", extra: str = "", rows: list[dict[str, Any]] | None = None
) -> None:
    """A suite with one model agent ``math`` at ``model_url``."""
    (root / "suite").mkdir(exist_ok=True)
    (root / "suite" / "rollouts.toml").write_text(
        f'datasets = ["data.jsonl"]\nagent = "math"\n[agents.math]\nmodel = "{model_url}"\n'
        f'model_name = "fake-model"\napi = "{api}"\nverifier = "verify.py:score"\n{extra}'
    )
    (root / "suite" / "verify.py").write_text(VERIFY)
    (root / "suite" / "tools.py").write_text(TOOLS)
    write_rows(root / "suite" / "data.jsonl", rows if rows is not None else questions(4))


def questions(n: int) -> list[dict[str, Any]]:
    """``say <i>`` rows: the echo model answers right where the expected answer is ``i``, and
    wrong on every fourth row."""
    return [
        {
            "responses_create_params": {"input": f"say {i}", "temperature": 0.5},
            "expected_answer": str(i if i % 4 else -1),
        }
        for i in range(n)
    ]


def adds_then_answers(call: Call) -> Reply:
    """Calls ``add`` (and an unknown tool, and one that raises) first, then says what ``add`` said."""
    said = tool_outputs(call)
    if not said:
        return reply_of(
            call, None, [("c1", "add", '{"a": 2, "b": 3}'), ("c2", "nope", "{}"), ("c3", "fail", '{"why": "boom"}')]
        )
    if len(said) == 3:
        return reply_of(call, None, [("c4", "add", "{not json")])
    return reply_of(call, said[0])
