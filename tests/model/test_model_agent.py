"""The built-in model agent end to end: a suite's rows through a real pytest session against a
fake OpenAI-compatible model on 127.0.0.1, for both APIs, with tools over several turns."""

from __future__ import annotations

import orjson
import pytest

from ..helpers import Artifacts, run_rollouts
from ..models import CHAT, RESPONSES, FakeModel, adds_then_answers, questions, reply_of, write_suite


@pytest.mark.parametrize("api", [CHAT, RESPONSES])
def test_rows_are_scored_by_the_suites_verifier(pytester: pytest.Pytester, model: FakeModel, api: str) -> None:
    write_suite(pytester.path, model.base_url, api=api)
    result = run_rollouts(pytester, "suite", "--rollouts-repeats=2")
    assert result.ret == 0, result.stdout.str()
    rows = sorted(Artifacts(pytester.path).rows, key=lambda r: (r["_ng_task_index"], r["_ng_rollout_index"]))
    assert [r["reward"] for r in rows] == [0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    first = rows[2]
    assert first["response"]["object"] == "response"
    assert first["response"]["output"][-1]["content"][0]["text"] == "1"
    assert first["response"]["usage"]["input_tokens"] == 10
    perf = first["ng_perf"]
    assert perf.pop("total_latency_ms") > 0
    # The fake Responses model reports its cached and reasoning tokens (0); the chat one does not.
    assert perf == {
        "num_turns": 1,
        "num_tool_calls": 0,
        "token_observability_coverage": 1.0,
        "prompt_tokens": 10,
        "completion_tokens": 5,
        **({"cached_prompt_tokens": 0, "reasoning_tokens": 0} if api == RESPONSES else {}),
    }
    (call,) = first["ng_trajectory"]["model_calls"]
    assert {k: call["token_stats"][k] for k in ("prompt_tokens", "completion_tokens", "total_tokens")} == {
        "prompt_tokens": 10,
        "completion_tokens": 5,
        "total_tokens": 15,
    }
    assert {c.api for c in model.calls} == {api}
    assert model.elsewhere == []  # no /health, no /aggregate_metrics: a model has neither
    assert sorted(c.headers["X-Rollouts-Rollout"] for c in model.calls) == [
        f"{t}.{r}" for t in range(4) for r in range(2)
    ]
    assert all(c.body["model"] == "fake-model" and c.body["temperature"] == 0.5 for c in model.calls)


@pytest.mark.parametrize("api", [CHAT, RESPONSES])
def test_tools_run_over_several_turns(pytester: pytest.Pytester, api: str) -> None:
    with FakeModel(adds_then_answers) as model:
        write_suite(
            pytester.path,
            model.base_url,
            api=api,
            extra='tools = "tools.py:TOOLS"\nmax_turns = 4\n',
            rows=[{"responses_create_params": {"input": "2 + 3?"}, "expected_answer": "5"}],
        )
        result = run_rollouts(pytester, "suite")
    assert result.ret == 0, result.stdout.str()
    (row,) = Artifacts(pytester.path).rows
    assert row["reward"] == 1.0
    assert row["ng_perf"]["num_turns"] == 3
    assert row["ng_perf"]["prompt_tokens"] == 30
    assert row["ng_perf"]["num_tool_calls"] == 4
    trajectory = row["ng_trajectory"]
    assert [t["turn_no"] for t in trajectory["turns"]] == [1, 2, 3]
    assert [c["tool_name"] for c in trajectory["tool_calls"]] == ["add", "nope", "fail", "add"]
    assert trajectory["tool_calls"][0]["output"] == "5"
    # Each turn's question is what the model saw first then: the prompt, then the tool outputs.
    assert [len(t["question"]) for t in trajectory["turns"]] == [1, 3, 1]
    outputs = [i["output"] for i in row["response"]["output"] if i["type"] == "function_call_output"]
    assert outputs[0] == "5"
    assert "no tool named 'nope'" in outputs[1]
    assert outputs[2] == "error: RuntimeError: boom"
    assert "not valid JSON" in outputs[3]
    first = model.calls[0].body
    names = [t["function"]["name"] if api == CHAT else t["name"] for t in first["tools"]]
    assert names == ["add", "fail"]
    add = first["tools"][0]["function"] if api == CHAT else first["tools"][0]
    assert add["description"] == "Add two integers."
    assert add["parameters"]["required"] == ["a", "b"]


def test_max_turns_ends_a_loop_that_never_stops_calling_tools(pytester: pytest.Pytester) -> None:
    with FakeModel(lambda call: reply_of(call, None, [("c", "add", '{"a": 1, "b": 1}')])) as model:
        write_suite(pytester.path, model.base_url, extra='tools = "tools.py:TOOLS"\nmax_turns = 3\n', rows=questions(1))
        result = run_rollouts(pytester, "suite")
    assert result.ret == 0, result.stdout.str()
    (row,) = Artifacts(pytester.path).rows
    assert row["ng_perf"]["num_turns"] == 3 and len(model.calls) == 3
    assert row["reward"] == 0.0


def test_tokens_and_turns_are_totalled_in_the_summary_and_the_metrics_file(
    pytester: pytest.Pytester, model: FakeModel
) -> None:
    write_suite(pytester.path, model.base_url)
    result = run_rollouts(pytester, "suite", "--rollouts-repeats=2")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(
        ["math: 95% CI *; 120 tokens (80 in, 40 out; mean 15.0 per rollout), 8 turns (mean 1.00), * tokens/s (* out)"]
    )
    (group,) = orjson.loads((pytester.path / "out" / "r_aggregate_metrics.json").read_bytes())
    usage = group["usage_summary"]
    assert {k: usage[k] for k in ("num_rollouts", "input_tokens", "output_tokens", "total_tokens", "num_turns")} == {
        "num_rollouts": 8,
        "input_tokens": 80,
        "output_tokens": 40,
        "total_tokens": 120,
        "num_turns": 8,
    }
    # Per second of the run's dispatch: timing, so with the rest of the timing.
    assert group["perf_summary"]["total_tokens_per_second"] == 120 / group["perf_summary"]["seconds"]
    assert group["agent_metrics"]["mean/num_turns"] == 1.0
    assert group["agent_metrics"]["mean/input_tokens"] == 10.0
