"""The seeded baseline model (``evalsuites/baseline_model.py``) on the wire, through the official
``openai`` client: Chat Completions and Responses replies parse (and validate against the client's
own types), a tool-call loop runs by hand, replies are reproducible per rollout, and what it does
not do (streaming, bad bodies) is refused in OpenAI's error shape."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletion
from openai.types.responses import Response

from ..suites import ROLLOUT_HEADER, BaselineModel, Suite, description, parameters, run_tool, user_text


@pytest.fixture(scope="module")
def model() -> Iterator[BaselineModel]:
    with BaselineModel() as server:
        yield server


@pytest.fixture(scope="module")
def client(model: BaselineModel) -> openai.OpenAI:
    return openai.OpenAI(base_url=model.base_url, api_key="x", max_retries=0)


@pytest.fixture(scope="module")
def tool_use() -> Suite:
    return Suite("tool_use")


def header(task: int, repeat: int) -> dict[str, str]:
    return {ROLLOUT_HEADER: f"{task}.{repeat}"}


ARITHMETIC = "What is 38 * 79? Put the final answer in \\boxed{}."


def test_chat_completion_parses_and_is_labelled(client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(
        model="seeded-baseline", messages=[{"role": "user", "content": ARITHMETIC}], extra_headers=header(0, 0)
    )
    ChatCompletion.model_validate(completion.model_dump())  # every field the client's type requires
    assert completion.model == "seeded-baseline"
    assert completion.system_fingerprint is not None and "not-a-model" in completion.system_fingerprint
    choice = completion.choices[0]
    assert choice.finish_reason == "stop" and choice.message.role == "assistant"
    assert "\\boxed{" in (choice.message.content or "")
    assert completion.usage is not None
    assert completion.usage.total_tokens == completion.usage.prompt_tokens + completion.usage.completion_tokens > 0


def test_response_parses_and_is_labelled(client: openai.OpenAI) -> None:
    response = client.responses.create(model="seeded-baseline", input=ARITHMETIC, extra_headers=header(0, 0))
    Response.model_validate(response.model_dump())
    assert response.model == "seeded-baseline" and response.status == "completed"
    assert response.metadata is not None and "not-a-model" in response.metadata["system_fingerprint"]
    assert "\\boxed{" in response.output_text
    assert response.usage is not None
    assert response.usage.total_tokens == response.usage.input_tokens + response.usage.output_tokens > 0


def test_models_lists_the_stand_in(client: openai.OpenAI) -> None:
    assert [m.id for m in client.models.list()] == ["seeded-baseline"]


def test_async_client_works(model: BaselineModel) -> None:
    async def both() -> tuple[str, str]:
        async with openai.AsyncOpenAI(base_url=model.base_url, api_key="x", max_retries=0) as aclient:
            chat = await aclient.chat.completions.create(
                model="m", messages=[{"role": "user", "content": ARITHMETIC}], extra_headers=header(3, 1)
            )
            response = await aclient.responses.create(model="m", input=ARITHMETIC, extra_headers=header(3, 1))
            return chat.choices[0].message.content or "", response.output_text

    chat_text, responses_text = asyncio.run(both())
    assert chat_text == responses_text, "one rollout, one answer, whichever API asks"


def chat_tools(suite: Suite) -> list[dict[str, Any]]:
    return [
        {"type": "function", "function": {"name": n, "description": description(f), "parameters": parameters(f)}}
        for n, f in suite.tools.items()
    ]


def test_chat_tool_call_loop_by_hand(client: openai.OpenAI, tool_use: Suite) -> None:
    """Look-ups, then the calculator, then a boxed answer built from the calculator's result."""
    solved = 0
    for task, row in enumerate(tool_use.rows[:20]):
        messages: list[Any] = [{"role": "user", "content": user_text(row)}]
        names: list[str] = []
        for _ in range(6):
            completion = client.chat.completions.create(
                model="m", messages=messages, tools=chat_tools(tool_use), extra_headers=header(task, 0)
            )
            message = completion.choices[0].message
            if not message.tool_calls:
                assert completion.choices[0].finish_reason == "stop"
                break
            assert completion.choices[0].finish_reason == "tool_calls"
            messages.append(message.model_dump(exclude_none=True))
            for call in message.tool_calls:
                names.append(call.function.name)
                result = run_tool(tool_use.tools, call.function.name, call.function.arguments)
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
        answer = message.content or ""
        if names:
            assert names[0] == "lookup", "facts first"
            if "calculator" in names:
                calculated = messages[-1]["content"]
                assert f"\\boxed{{{calculated}}}" in answer, "the answer is the calculator's result"
        solved += f"\\boxed{{{row['expected_answer']}}}" in answer
    assert 5 < solved < 20


def test_responses_tool_call_loop_by_hand(client: openai.OpenAI, tool_use: Suite) -> None:
    tools: list[Any] = [
        {"type": "function", "name": n, "description": description(f), "parameters": parameters(f), "strict": False}
        for n, f in tool_use.tools.items()
    ]
    turns_seen = set()
    for task, row in enumerate(tool_use.rows[:40]):
        items: list[Any] = list(row["responses_create_params"]["input"])
        turns = 0
        while turns < 6:
            turns += 1
            response = client.responses.create(model="m", input=items, tools=tools, extra_headers=header(task, 0))
            Response.model_validate(response.model_dump())
            calls = [item for item in response.output if item.type == "function_call"]
            items += [item.model_dump(exclude_none=True) for item in response.output]
            if not calls:
                break
            for call in calls:
                output = run_tool(tool_use.tools, call.name, call.arguments)
                items.append({"type": "function_call_output", "call_id": call.call_id, "output": output})
        turns_seen.add(turns)
        assert "\\boxed{" in response.output_text
    assert max(turns_seen) >= 4, "some tasks take several turns"
    assert min(turns_seen) == 1, "some rollouts guess without the tools"


def test_same_rollout_same_reply_other_rollout_sometimes_differs(model: BaselineModel) -> None:
    """Byte for byte, so result rows are reproducible; but repeats of a task do vary."""
    import urllib.request

    def post(path: str, body: dict[str, Any], rollout: str) -> bytes:
        request = urllib.request.Request(
            model.base_url + path,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json", ROLLOUT_HEADER: rollout},
        )
        with urllib.request.urlopen(request) as reply:
            return reply.read()

    structured = Suite("structured")
    body = {"model": "m", "input": structured.rows[0]["responses_create_params"]["input"]}
    assert post("/responses", body, "0.0") == post("/responses", body, "0.0")
    chat = {"model": "m", "messages": [{"role": "user", "content": ARITHMETIC}]}
    assert post("/chat/completions", chat, "0.0") == post("/chat/completions", chat, "0.0")
    assert len({post("/responses", body, f"0.{r}") for r in range(8)}) > 1
    assert (
        len(
            {
                json.loads(post("/chat/completions", chat, f"5.{r}"))["choices"][0]["message"]["content"]
                for r in range(12)
            }
        )
        > 1
    )


def test_seed_param_varies_the_reply_without_the_header(client: openai.OpenAI) -> None:
    texts = {
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": ARITHMETIC}], seed=seed)
        .choices[0]
        .message.content
        for seed in range(12)
    }
    assert len(texts) > 1


def test_stream_is_refused_cleanly(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as chat_error:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": ARITHMETIC}], stream=True)
    assert chat_error.value.status_code == 400
    assert chat_error.value.body is not None and chat_error.value.body["param"] == "stream"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as responses_error:
        client.responses.create(model="m", input=ARITHMETIC, stream=True)
    assert "does not stream" in str(responses_error.value)


def test_bad_bodies_get_openai_errors(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError, match="messages"):
        client.chat.completions.create(model="m", messages=[])
    with pytest.raises(openai.BadRequestError, match="input"):
        client.responses.create(model="m", input=[])


def test_an_unknown_prompt_gets_a_polite_non_answer(client: openai.OpenAI) -> None:
    response = client.responses.create(model="m", input="Write a haiku about autumn.")
    assert "not a model" in response.output_text


def test_no_tools_offered_means_a_guess(client: openai.OpenAI, tool_use: Suite) -> None:
    row = tool_use.rows[0]
    completion = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": user_text(row)}], extra_headers=header(0, 0)
    )
    message = completion.choices[0].message
    assert not message.tool_calls and f"\\boxed{{{row['expected_answer']}}}" not in (message.content or "")
