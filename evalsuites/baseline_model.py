"""The seeded baseline: a stand-in for a model, NOT a model, served as an OpenAI-compatible API.

Why it exists: the shipped suites (``evalsuites/``) have to run out of the box, with no model
endpoint, no API key and no network, and give the same scores on every machine, so the built-in
model agent's whole path (chat or responses calls, tool calls, verifiers, artifacts, metrics,
pass@k) is exercised for real. It never reasons and its scores are evidence of nothing. Every
reply says so: its ``model`` is ``seeded-baseline`` and its ``system_fingerprint`` (chat) or
``metadata`` (responses) says ``not-a-model``.

It speaks just enough of two OpenAI APIs, non-streaming (``"stream": true`` gets a 400):

* ``POST /v1/chat/completions`` (Chat Completions; tool calls as ``tool_calls``),
* ``POST /v1/responses`` (Responses; tool calls as ``function_call`` output items),
* ``GET /v1/models``.

It recognises the three shipped suites' prompts and answers them like a fallible model:

* arithmetic ("What is 38 * 79? ..."): text ending in ``\\boxed{answer}``, right with a
  probability that falls with the size of the operands, otherwise off by one or two;
* tool_use (fictional cities' facts): calls ``lookup`` for each fact it needs (one per turn or all
  in one turn), reads the results from the conversation, calls ``calculator``, then answers with
  the calculator's result. Now and then it skips the tools and guesses, or copies a number wrong
  into the calculator; more often on harder tasks, and on a few tasks nearly always;
* structured (a text and a JSON Schema): a JSON object, with seeded per-field slips (a number as a
  string, a date left unconverted, a field left out...) and now and then a fence or a truncated
  reply.

Anything else gets a polite "I only know the shipped suites" text.

Reproducibility: each rollout's randomness is seeded from the prompt, the rollout index of the
``X-Rollouts-Rollout`` header the built-in agent sends on every call (``<task_index>.<rollout_index>``;
not the task index, which depends on the suites run beside it) or else the request's ``seed``,
with SHA-512 string seeding, independent of ``PYTHONHASHSEED``. The
decisions of a rollout are drawn afresh in the same order on every turn, so a multi-turn rollout
follows one consistent plan; ids and timestamps are derived, not random, so the same request gives
a byte-identical reply.

pytest-rollouts loads this file by path and calls ``make_app()`` (``model_embedded`` in a suite's
``rollouts.toml``). To serve it on its own: ``python baseline_model.py --port 8001``, then point
any OpenAI client at ``http://127.0.0.1:8001/v1``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from aiohttp import web

MODEL = "seeded-baseline"
FINGERPRINT = "seeded-baseline-not-a-model"
ROLLOUT_HEADER = "X-Rollouts-Rollout"
CREATED = 0  # a fixed timestamp, so that replies are byte-identical across runs

ARITHMETIC_RE = re.compile(r"What is (\d+) ([-+*/]) (\d+)\?")
SCHEMA_RE = re.compile(r"Schema:\n(\{.*?\})\n\nText:\n(.*)", re.S)
TOOL_QUESTIONS = (
    ("since", 1, re.compile(r"How many years before (\d+) was (\w+) founded\?")),
    ("sum", 2, re.compile(r"What is the combined population of (\w+) and (\w+)\?")),
    ("gap", 2, re.compile(r"How many years apart were (\w+) and (\w+) founded\?")),
    ("density", 3, re.compile(r"What is the population density of (\w+) in people per km²")),
    ("area3", 3, re.compile(r"What is the total area in km² of (\w+), (\w+) and (\w+)\?")),
)
MONTHS = (
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
)


class BadRequest(ValueError):
    """The request is not one this server can answer; the client gets a 400 in OpenAI's shape."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


def error_response(message: str, param: str | None = None, status: int = 400) -> web.Response:
    """An error body as OpenAI sends it, which its client turns into ``openai.BadRequestError``."""
    body = {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": None}}
    return web.json_response(body, status=status)


# -- reading a request ---------------------------------------------------------------------------


@dataclass
class Call:
    """One tool call seen in the conversation, with its output once the agent has sent it."""

    call_id: str
    name: str
    arguments: str
    output: str | None = None

    def args(self) -> dict[str, Any]:
        try:
            value = json.loads(self.arguments)
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}


@dataclass
class Conversation:
    """What a model call carries that this stand-in reads: the user's text, the tool calls made so
    far (with their outputs), the tools on offer, and everything that counts as input tokens."""

    user_text: str = ""
    calls: list[Call] = field(default_factory=list)
    tools: set[str] = field(default_factory=set)
    all_text: list[str] = field(default_factory=list)

    def add_output(self, call_id: Any, output: str) -> None:
        self.all_text.append(output)
        for call in self.calls:
            if call.call_id == call_id:
                call.output = output


def _text_of(content: Any) -> str:
    """A message's text: a string, or the text of its parts (text, input_text, output_text)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def read_chat(body: dict[str, Any]) -> Conversation:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty array", "messages")
    conv, users = Conversation(), []
    for message in messages:
        if not isinstance(message, dict):
            raise BadRequest("each message must be an object", "messages")
        role, text = message.get("role"), _text_of(message.get("content"))
        conv.all_text.append(text)
        if role == "user":
            users.append(text)
        elif role == "assistant":
            for call in message.get("tool_calls") or []:
                function = call.get("function", {}) if isinstance(call, dict) else {}
                arguments = function.get("arguments", "")
                conv.calls.append(Call(str(call.get("id")), str(function.get("name")), str(arguments)))
                conv.all_text.append(str(arguments))
        elif role == "tool":
            conv.add_output(message.get("tool_call_id"), text)
    for tool in body.get("tools") or []:
        if isinstance(tool, dict) and isinstance(tool.get("function"), dict):
            conv.tools.add(str(tool["function"].get("name")))
    conv.user_text = "\n".join(users)
    return conv


def read_responses(body: dict[str, Any]) -> Conversation:
    items = body.get("input")
    conv = Conversation()
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    if not isinstance(items, list) or not items:
        raise BadRequest("'input' must be a string or a non-empty array", "input")
    users = []
    for item in items:
        if not isinstance(item, dict):
            raise BadRequest("each input item must be an object", "input")
        kind = item.get("type", "message")
        if kind == "message":
            text = _text_of(item.get("content"))
            conv.all_text.append(text)
            if item.get("role") == "user":
                users.append(text)
        elif kind == "function_call":
            conv.calls.append(Call(str(item.get("call_id")), str(item.get("name")), str(item.get("arguments", ""))))
            conv.all_text.append(str(item.get("arguments", "")))
        elif kind == "function_call_output":
            conv.add_output(item.get("call_id"), _text_of(item.get("output")))
    if isinstance(body.get("instructions"), str):
        conv.all_text.append(body["instructions"])
    for tool in body.get("tools") or []:
        if isinstance(tool, dict) and tool.get("type") == "function":
            conv.tools.add(str(tool.get("name")))
    conv.user_text = "\n".join(users)
    return conv


# -- answering -----------------------------------------------------------------------------------


@dataclass
class Turn:
    """One reply: either tool calls (name, arguments) or a final text."""

    text: str = ""
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


class SeededBaseline:
    """The policy: reads a conversation, returns the next turn. Stateless; see the module doc."""

    p_arithmetic: Mapping[int, float] = MappingProxyType({1: 0.9, 2: 0.65, 3: 0.4})
    p_guess: Mapping[int, float] = MappingProxyType({1: 0.1, 2: 0.15, 3: 0.2})
    p_slip: Mapping[int, float] = MappingProxyType({1: 0.05, 2: 0.15, 3: 0.3})
    p_field: Mapping[int, float] = MappingProxyType({1: 0.06, 2: 0.12, 3: 0.2})
    p_stubborn: float = 0.15
    p_truncated: float = 0.04
    p_fence: float = 0.3

    def reply(self, conv: Conversation, rollout: str) -> Turn:
        text = conv.user_text
        if (match := ARITHMETIC_RE.search(text)) is not None:
            return self.arithmetic(match, self.rng("arithmetic", text, rollout))
        for kind, difficulty, pattern in TOOL_QUESTIONS:
            if (match := pattern.search(text)) is not None:
                return self.tool_use(conv, kind, difficulty, match, self.rng("tool_use", text, rollout))
        if (match := SCHEMA_RE.search(text)) is not None:
            return self.structured(match, self.rng("structured", text, rollout))
        return Turn(text="I am the seeded baseline, not a model: I only know the prompts of the shipped suites.")

    @staticmethod
    def rng(suite: str, text: str, rollout: str) -> random.Random:
        # A string seed: random.Random hashes it with SHA-512, independent of PYTHONHASHSEED.
        return random.Random(f"{suite}|{text}|{rollout}")

    # arithmetic

    def arithmetic(self, match: re.Match[str], rng: random.Random) -> Turn:
        a, op, b = int(match[1]), match[2], int(match[3])
        if op == "/" and b == 0:
            return Turn(text="Division by zero is undefined, so there is no answer.")
        truth = {"+": a + b, "-": a - b, "*": a * b, "/": a // b}[op]
        # The stand-in cannot see the dataset's difficulty label; what it "finds hard" is digits.
        digits = len(str(a)) + len(str(b))
        difficulty = 1 if digits <= 3 else 2 if digits <= 4 else 3
        correct = rng.random() < self.p_arithmetic[difficulty]
        value = truth if correct else truth + rng.choice((-2, -1, 1, 2))
        return Turn(text=f"{a} {op} {b} = {value}, so the answer is \\boxed{{{value}}}")

    # tool_use

    def tool_use(
        self, conv: Conversation, kind: str, difficulty: int, match: re.Match[str], rng: random.Random
    ) -> Turn:
        # Every decision is drawn on every turn, in the same order, so one rollout keeps one plan.
        guess = rng.random() < self.p_guess[difficulty]
        guess_value = rng.randint(10, 99_999)
        parallel = rng.random() < 0.5
        # Some tasks are hard for it on every repeat (as for a model), so pass@k does not saturate.
        stubborn = random.Random(f"tool_use-task|{conv.user_text}").random() < self.p_stubborn
        slip = rng.random() < (0.9 if stubborn else self.p_slip[difficulty])
        slip_at, slip_sign, slip_digit = rng.random(), rng.choice((-1, 1)), rng.randint(0, 2)
        unaided = rng.random() < 0.15  # does the arithmetic itself (correctly) instead of calling it
        if kind == "since":
            keys = [f"{match[2]}.founded"]
        elif kind in ("sum",):
            keys = [f"{match[1]}.population", f"{match[2]}.population"]
        elif kind == "gap":
            keys = [f"{match[1]}.founded", f"{match[2]}.founded"]
        elif kind == "density":
            keys = [f"{match[1]}.population", f"{match[1]}.area_km2"]
        else:
            keys = [f"{city}.area_km2" for city in match.groups()]
        if not {"lookup", "calculator"} <= conv.tools or (guess and not conv.calls):
            return Turn(text=f"From what I know, the answer is about {guess_value}, so \\boxed{{{guess_value}}}")
        looked_up = {str(c.args().get("key", "")).lower(): c for c in conv.calls if c.name == "lookup"}
        pending = [key for key in keys if key.lower() not in looked_up]
        if pending:
            return Turn(calls=[("lookup", {"key": key}) for key in (pending if parallel else pending[:1])])
        if any(looked_up[key.lower()].output is None for key in keys):
            return Turn(text="I am still waiting for the lookup results, so I cannot answer yet.")
        try:
            values = [int(looked_up[key.lower()].output or "") for key in keys]
        except ValueError:
            return Turn(text="The lookup did not give me a number, so I cannot answer: \\boxed{unknown}")
        if slip:  # copies one number wrong
            i = int(slip_at * len(values))
            values[i] = max(1, values[i] + slip_sign * 10**slip_digit)
        if kind == "since":
            expression = f"{match[1]} - {values[0]}"
        elif kind == "gap":
            expression = f"{max(values)} - {min(values)}"
        elif kind == "density":
            expression = f"{values[0]} // {values[1]}"
        else:
            expression = " + ".join(map(str, values))
        calculated = [c for c in conv.calls if c.name == "calculator" and c.output is not None]
        if unaided:
            result = str(eval_plain(expression))
        elif not calculated:
            return Turn(calls=[("calculator", {"expression": expression})])
        else:
            result = calculated[-1].output or ""
        if not re.fullmatch(r"-?\d+", result.strip()):
            return Turn(text=f"The calculator said {result!r}; I cannot give a number: \\boxed{{unknown}}")
        return Turn(text=f"Using the looked-up values, {expression} = {result.strip()}. \\boxed{{{result.strip()}}}")

    # structured

    def structured(self, match: re.Match[str], rng: random.Random) -> Turn:
        try:
            schema = json.loads(match[1])
        except ValueError:
            return Turn(text="{}")
        text = match[2]
        fields = list(schema.get("properties", {}))
        difficulty = 1 if len(fields) <= 4 else 2 if len(fields) <= 6 else 3
        found = read_person(text)
        answer: dict[str, Any] = {}
        for name in fields:
            slipped = rng.random() < self.p_field[difficulty]
            how = rng.random()
            if name not in found:
                continue
            value = found[name]
            if slipped:
                value = slip_field(name, value, how, found)
                if value is OMIT:
                    continue
            answer[name] = value
        reply = json.dumps(answer, indent=2)
        if rng.random() < self.p_truncated:
            reply = reply[: len(reply) // 2]
        if rng.random() < self.p_fence:
            reply = f"```json\n{reply}\n```"
        return Turn(text=reply)


OMIT = object()


def eval_plain(expression: str) -> int:
    """The stand-in's own arithmetic for the expressions it writes: ``a + b``, ``a - b``, ``a // b``."""
    if "//" in expression:
        a, b = expression.split("//")
        return int(a) // int(b)
    if " - " in expression:
        a, b = expression.split(" - ")
        return int(a) - int(b)
    return sum(int(x) for x in expression.split("+"))


def read_person(text: str) -> dict[str, Any]:
    """The facts of the structured suite's text, read with its templates in mind."""
    found: dict[str, Any] = {}
    if m := re.search(r"^(.+?) is (\d+) years old and lives in (\w+)\.", text):
        found.update(name=m[1], age=int(m[2]), city=m[3])
    if m := re.search(r" is (a|not a) member of", text):
        found["member"] = m[1] == "a"
    if m := re.search(r"reach \w+ at (\S+?)\.(?:\s|$)", text):
        found["email"] = m[1]
    if m := re.search(r"\w+ enjoys (.+?)\.(?:\s|$)", text):
        found["interests"] = [x.strip() for x in re.split(r",| and ", m[1]) if x.strip()]
    if m := re.search(r"joined on (\w+) (\d+), (\d{4})", text):
        month = MONTHS.index(m[1].lower()) + 1 if m[1].lower() in MONTHS else 1
        found["joined"] = f"{m[3]}-{month:02d}-{int(m[2]):02d}"
        found["_joined_text"] = f"{m[1]} {m[2]}, {m[3]}"
    if m := re.search(r"latest rating is (\d+(?:\.\d+)?)", text):
        found["rating"] = float(m[1])
    if m := re.search(r"'s \w+, [\w ]+, is (\d+)\.", text):
        found["_other_age"] = int(m[1])
    return found


def slip_field(name: str, value: Any, how: float, found: dict[str, Any]) -> Any:
    """One plausible mistake for a field: a wrong type, a wrong value, or leaving it out."""
    if name == "name":
        return value.split()[0] if how < 0.5 else value.upper()
    if name == "age":
        if how < 0.4:
            return str(value)
        return found.get("_other_age", value + 1) if how < 0.7 else value + 1
    if name == "city":
        return value.lower()
    if name == "member":
        return "yes" if value else "no"
    if name == "email":
        return OMIT
    if name == "interests":
        return ", ".join(value)
    if name == "joined":
        return found.get("_joined_text", value)
    if name == "rating":
        return round(value) if how < 0.5 else OMIT
    return OMIT


BASELINE = SeededBaseline()


# -- writing a reply -----------------------------------------------------------------------------


def _id(prefix: str, *parts: Any) -> str:
    return prefix + hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest()[:24]


def _tokens(*texts: str) -> int:
    """A plausible token count: whitespace-separated words."""
    return sum(len(t.split()) for t in texts)


def chat_reply(body: dict[str, Any], conv: Conversation, turn: Turn, rollout: str) -> dict[str, Any]:
    key = (rollout, conv.user_text, len(conv.calls))
    message: dict[str, Any] = {"role": "assistant", "content": turn.text or None, "refusal": None}
    out = [turn.text]
    if turn.calls:
        message["tool_calls"] = []
        for i, (name, args) in enumerate(turn.calls):
            arguments = json.dumps(args)
            out.append(arguments)
            message["tool_calls"].append(
                {"id": _id("call_", *key, i), "type": "function", "function": {"name": name, "arguments": arguments}}
            )
    prompt, completion = _tokens(*conv.all_text), _tokens(*out)
    return {
        "id": _id("chatcmpl-", *key),
        "object": "chat.completion",
        "created": CREATED,
        "model": MODEL,
        "system_fingerprint": FINGERPRINT,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": "tool_calls" if turn.calls else "stop",
            }
        ],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
    }


def responses_reply(body: dict[str, Any], conv: Conversation, turn: Turn, rollout: str) -> dict[str, Any]:
    key = (rollout, conv.user_text, len(conv.calls))
    output: list[dict[str, Any]] = []
    out = [turn.text]
    for i, (name, args) in enumerate(turn.calls):
        arguments = json.dumps(args)
        out.append(arguments)
        output.append(
            {
                "type": "function_call",
                "id": _id("fc_", *key, i),
                "call_id": _id("call_", *key, i),
                "name": name,
                "arguments": arguments,
                "status": "completed",
            }
        )
    if not turn.calls:
        output.append(
            {
                "type": "message",
                "id": _id("msg_", *key),
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": turn.text, "annotations": []}],
            }
        )
    prompt, completion = _tokens(*conv.all_text), _tokens(*out)
    tools = body.get("tools") if isinstance(body.get("tools"), list) else []
    return {
        "id": _id("resp_", *key),
        "object": "response",
        "created_at": CREATED,
        "status": "completed",
        "model": MODEL,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": tools,
        "error": None,
        "incomplete_details": None,
        "instructions": body.get("instructions"),
        "metadata": {"system_fingerprint": FINGERPRINT},
        "temperature": body.get("temperature", 1.0),
        "top_p": body.get("top_p", 1.0),
        "usage": {
            "input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": completion,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt + completion,
        },
    }


async def _serve(request: web.Request, read: Any, write: Any) -> web.Response:
    try:
        try:
            body = json.loads(await request.read())
        except ValueError as exc:
            raise BadRequest(f"the body is not JSON: {exc}") from exc
        if not isinstance(body, dict):
            raise BadRequest("the body must be a JSON object")
        if body.get("stream"):
            raise BadRequest("the seeded baseline does not stream; send 'stream': false", "stream")
        conv = read(body)
        # The built-in agent names each rollout ``<task>.<rollout>``; only the repeat counts, so a task
        # scores the same whichever suites run beside it (its task index depends on them). Without
        # the header, the request's seed is the next best.
        header = request.headers.get(ROLLOUT_HEADER)
        rollout = f"rollout={header.rpartition('.')[2]}" if header else f"seed={body.get('seed')}"
        return web.json_response(write(body, conv, BASELINE.reply(conv, rollout), rollout))
    except BadRequest as exc:
        return error_response(str(exc), exc.param)


async def handle_chat(request: web.Request) -> web.Response:
    """``POST /v1/chat/completions``."""
    return await _serve(request, read_chat, chat_reply)


async def handle_responses(request: web.Request) -> web.Response:
    """``POST /v1/responses``."""
    return await _serve(request, read_responses, responses_reply)


async def handle_models(request: web.Request) -> web.Response:
    """``GET /v1/models``: the one model it pretends to be."""
    model = {"id": MODEL, "object": "model", "created": CREATED, "owned_by": "pytest-rollouts (not a model)"}
    return web.json_response({"object": "list", "data": [model]})


async def handle_health(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


def make_app() -> web.Application:
    """The stand-in as an aiohttp application; pytest-rollouts serves it on a free local port."""
    app = web.Application()
    app.router.add_post("/v1/chat/completions", handle_chat)
    app.router.add_post("/v1/responses", handle_responses)
    app.router.add_get("/v1/models", handle_models)
    app.router.add_get("/health", handle_health)
    return app


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Serve the seeded baseline (a stand-in, not a model).")
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8001, help="port to listen on (default 8001)")
    args = parser.parse_args()
    web.run_app(make_app(), host=args.host, port=args.port)
