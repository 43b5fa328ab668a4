"""Between the OpenAI Responses API and Chat Completions, as NeMo Gym's model servers convert.

The agent keeps one conversation, in Responses items, whichever API the model speaks: a row's
``responses_create_params`` are Responses-shaped, and a verifier always gets a Responses-shaped
response. For a chat model, the request is converted on the way out and the reply on the way
back. Pure functions over dicts, so both directions are tested without a server.
"""

from __future__ import annotations

import time
from typing import Any

from pytest_rollouts.store.jsonl import loads

# Responses request fields with the same name and meaning in Chat Completions.
SAME_IN_CHAT = ("model", "temperature", "top_p", "seed", "parallel_tool_calls", "stop", "user", "n")
# Chat Completions fields a row may carry in responses_create_params for a chat model (vLLM's too).
CHAT_ONLY = ("frequency_penalty", "presence_penalty", "logprobs", "top_logprobs", "top_k", "min_p")


def input_items(params: dict[str, Any]) -> list[dict[str, Any]]:
    """A request's ``input`` as a list of items: a bare string is one user message."""
    given = params.get("input", [])
    if isinstance(given, str):
        return [{"role": "user", "content": given}]
    return list(given)


def extra_body(params: dict[str, Any]) -> dict[str, Any]:
    """``metadata.extra_body``, a JSON string (``{"seed": 3}`` under ``--rollouts-repeats-add-seed``),
    merged into the request body as NeMo Gym's model servers merge it; {} when there is none."""
    metadata = params.get("metadata")
    raw = metadata.get("extra_body") if isinstance(metadata, dict) else None
    if not isinstance(raw, str):
        return {}
    try:
        parsed = loads(raw.encode())
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def chat_request(params: dict[str, Any], items: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
    """A Chat Completions body for a Responses request whose conversation so far is ``items``.
    Responses-only fields (``text``, ``reasoning``, ``store``, ...) have no chat twin and stay behind."""
    body: dict[str, Any] = {key: params[key] for key in (*SAME_IN_CHAT, *CHAT_ONLY) if key in params}
    if params.get("max_output_tokens") is not None:
        body["max_tokens"] = params["max_output_tokens"]
    messages = [{"role": "system", "content": params["instructions"]}] if params.get("instructions") else []
    body["messages"] = messages + chat_messages(items)
    if tools:
        body["tools"] = [
            {"type": "function", "function": {k: t[k] for k in ("name", "description", "parameters") if k in t}}
            for t in tools
        ]
        if "tool_choice" in params:
            body["tool_choice"] = _chat_tool_choice(params["tool_choice"])
    body.update(extra_body(params))
    return body


def _chat_tool_choice(choice: Any) -> Any:
    if isinstance(choice, dict) and choice.get("type") == "function" and "name" in choice:
        return {"type": "function", "function": {"name": choice["name"]}}
    return choice


def chat_messages(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Responses input items as chat messages: consecutive function calls become one assistant
    message's ``tool_calls``, their outputs ``tool`` messages; reasoning items are not sent back."""
    messages: list[dict[str, Any]] = []
    for item in items:
        kind = item.get("type", "message")
        if kind == "function_call":
            call = {
                "id": item["call_id"],
                "type": "function",
                "function": {"name": item["name"], "arguments": item["arguments"]},
            }
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant" and "tool_calls" in last:
                last["tool_calls"].append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            messages.append({"role": "tool", "tool_call_id": item["call_id"], "content": str(item["output"])})
        elif kind == "message":
            messages.append({"role": item.get("role", "user"), "content": _text_of(item.get("content", ""))})
    return messages


def _text_of(content: Any) -> str:
    """A message's content as chat's plain text: the text of its parts, in order."""
    if isinstance(content, str):
        return content
    return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))


def responses_request(
    params: dict[str, Any], items: list[dict[str, Any]], tools: list[dict[str, Any]]
) -> dict[str, Any]:
    """A Responses body: the row's own params, the conversation so far, and the suite's tools."""
    body = {key: value for key, value in params.items() if key != "input"}
    body["input"] = items
    if tools:
        body["tools"] = [*params.get("tools", ()), *({"type": "function", **t} for t in tools)]
    body.update(extra_body(params))
    return body


def response_of_chat(reply: dict[str, Any]) -> dict[str, Any]:
    """A chat completion as a Responses object: text, reasoning and tool calls become output items."""
    choice = (reply.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    output: list[dict[str, Any]] = []
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    if reasoning:
        output.append(
            {
                "type": "reasoning",
                "id": f"rs_{reply.get('id', '')}",
                "summary": [{"type": "summary_text", "text": reasoning}],
            }
        )
    if message.get("content"):
        output.append(
            {
                "type": "message",
                "id": f"msg_{reply.get('id', '')}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": message["content"], "annotations": []}],
            }
        )
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        output.append(
            {
                "type": "function_call",
                "id": f"fc_{call.get('id', '')}",
                "call_id": call.get("id", ""),
                "name": function.get("name", ""),
                "arguments": function.get("arguments", ""),
                "status": "completed",
            }
        )
    usage = reply.get("usage") or {}
    return {
        "id": reply.get("id", ""),
        "object": "response",
        "created_at": reply.get("created", int(time.time())),
        "model": reply.get("model", ""),
        "status": "incomplete" if choice.get("finish_reason") == "length" else "completed",
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": responses_usage(
            usage.get("prompt_tokens", 0),
            usage.get("completion_tokens", 0),
            cached=(usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0),
            reasoning=(usage.get("completion_tokens_details") or {}).get("reasoning_tokens", 0),
        ),
    }


def responses_usage(input_tokens: int, output_tokens: int, *, cached: int = 0, reasoning: int = 0) -> dict[str, Any]:
    """Token usage in the Responses API's shape (NeMo Gym's ``response.usage``)."""
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": input_tokens + output_tokens,
    }


def output_text(response: dict[str, Any]) -> str:
    """The final assistant text of a Responses-shaped response ("" when it has none): what most
    verifiers score. Public as ``pytest_rollouts.output_text``; anything not so shaped (a verifier
    may be handed one in its own tests) has none, rather than an error."""
    output = response.get("output") if isinstance(response, dict) else None
    for item in reversed(output if isinstance(output, list) else ()):
        if isinstance(item, dict) and item.get("type") == "message" and item.get("role", "assistant") == "assistant":
            content = item.get("content", "")
            return _text_of(content) if isinstance(content, str | list) else ""
    return ""
