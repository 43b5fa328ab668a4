"""The model agent speaks OpenAI's wire format, checked with OpenAI's own client (a test-only
dependency): each request the agent sent is one the ``openai`` client sends itself when given
the same arguments (its ``create`` refuses an argument it does not know), and the fake model's
replies parse as the client's types."""

from __future__ import annotations

from typing import Any

import openai
import pytest
from openai.types.responses import Response

from ..agents import Reply
from ..helpers import Artifacts, run_rollouts
from ..models import CHAT, RESPONSES, FakeModel, adds_then_answers, chat_reply, write_suite


def agent_requests(pytester: pytest.Pytester, api: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """What the agent sent over a tool loop of three turns, and the row it stored."""
    with FakeModel(adds_then_answers) as model:
        write_suite(
            pytester.path,
            model.base_url,
            api=api,
            extra='tools = "tools.py:TOOLS"\n',
            rows=[
                {
                    "responses_create_params": {
                        "input": [{"role": "user", "content": [{"type": "input_text", "text": "2 + 3?"}]}],
                        "instructions": "Use the tools.",
                        "temperature": 0.7,
                        "top_p": 0.9,
                        "max_output_tokens": 256,
                        "tool_choice": "auto",
                        "metadata": {"extra_body": '{"seed": 3}'},
                    },
                    "expected_answer": "5",
                }
            ],
        )
        result = run_rollouts(pytester, "suite")
    assert result.ret == 0, result.stdout.str()
    (row,) = Artifacts(pytester.path).rows
    return [call.body for call in model.calls], row


def resent(api: str, body: dict[str, Any]) -> dict[str, Any]:
    """``body`` sent again through the ``openai`` client, as the server received it."""
    with FakeModel() as echo_model:
        client = openai.OpenAI(base_url=echo_model.base_url, api_key="unused", max_retries=0)
        known = {k: v for k, v in body.items() if k != "seed" or api == CHAT}
        extra = {k: v for k, v in body.items() if k not in known}
        create = client.chat.completions.create if api == CHAT else client.responses.create
        create(**known, extra_body=extra or None)
        (call,) = echo_model.calls
    return call.body


@pytest.mark.parametrize("api", [CHAT, RESPONSES])
def test_the_agents_requests_are_what_the_openai_client_sends(pytester: pytest.Pytester, api: str) -> None:
    bodies, row = agent_requests(pytester, api)
    assert len(bodies) == 3
    for body in bodies:
        assert resent(api, body) == body
    if api == CHAT:
        first = bodies[0]
        assert first["messages"][0] == {"role": "system", "content": "Use the tools."}
        assert (first["max_tokens"], first["seed"], "metadata" in first) == (256, 3, False)
        last = bodies[-1]["messages"]
        assert [m["role"] for m in last] == ["system", "user", "assistant", "tool", "tool", "tool", "assistant", "tool"]
    else:
        assert bodies[0]["max_output_tokens"] == 256 and bodies[0]["seed"] == 3
    # The final response is Responses-shaped for the verifier, whatever the API: every model
    # output item in it parses as OpenAI's (tool outputs are inputs in OpenAI's types). Its usage
    # is NeMo Gym's shape (contracts.md), which lacks the newest client's cache_write_tokens.
    response = dict(row["response"])
    response["output"] = [i for i in response["output"] if i["type"] != "function_call_output"]
    parsed = Response.model_validate({**response, "usage": None})
    assert parsed.output_text == "5"
    assert response["usage"]["total_tokens"] == 45 and response["usage"]["input_tokens"] == 30


def test_the_fake_models_replies_parse_with_the_openai_client() -> None:
    def tool_call(call: Any) -> Any:

        return Reply(json=chat_reply(None, [("c1", "add", '{"a": 1}')]))

    with FakeModel() as model:
        client = openai.OpenAI(base_url=model.base_url, api_key="unused", max_retries=0)
        chat = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "say hi"}])
        assert chat.choices[0].message.content == "hi"
        assert chat.usage is not None and chat.usage.total_tokens == 15
        response = client.responses.create(model="m", input="say there")
        assert response.output_text == "there"
        assert [m.id for m in client.models.list()] == ["fake"]
    with FakeModel(tool_call) as model:
        client = openai.OpenAI(base_url=model.base_url, api_key="unused", max_retries=0)
        chat = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
        (called,) = chat.choices[0].message.tool_calls or []
        assert called.function.name == "add"  # type: ignore[union-attr]
