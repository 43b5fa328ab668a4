"""Declaring model agents: where the model is (a URL with ``${VAR}``, an embedded app, the
command line's override), the name it is asked for, mistakes refused before any call, its
API key kept out of every output, and its calls bounded by --rollouts-model-parallel."""

from __future__ import annotations

from pathlib import Path

import pytest

from ..agents import Reply
from ..helpers import QUIET, Artifacts, run_rollouts
from ..models import Call, FakeModel, echo, questions, reply_of, write_suite

SECRET = "sk-test-9f8e7d6c5b4a39281706"

EMBEDDED_MODEL = """
from aiohttp import web

async def chat(request):
    body = await request.json()
    text = body["messages"][-1]["content"].removeprefix("say ")
    return web.json_response({
        "id": "c", "object": "chat.completion", "created": 0, "model": body["model"],
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 7, "completion_tokens": 1, "total_tokens": 8},
    })

def make_app():
    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    return app
"""


def test_an_embedded_model_is_served_on_loopback(pytester: pytest.Pytester) -> None:
    write_suite(pytester.path, "unused")
    toml = pytester.path / "suite" / "rollouts.toml"
    toml.write_text(toml.read_text().replace('model = "unused"', 'model_embedded = "../model_app.py:make_app"'))
    (pytester.path / "model_app.py").write_text(EMBEDDED_MODEL)
    result = run_rollouts(pytester, "suite")
    assert result.ret == 0, result.stdout.str()
    rows = Artifacts(pytester.path).rows
    assert sorted(r["reward"] for r in rows) == [0.0, 1.0, 1.0, 1.0]
    assert {r["response"]["usage"]["input_tokens"] for r in rows} == {7}


def test_the_command_line_replaces_every_model_and_its_name(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NOWHERE_URL", raising=False)  # the suite's own model would be an error
    with FakeModel() as model:
        write_suite(pytester.path, "${NOWHERE_URL}")
        result = run_rollouts(
            pytester, "suite", f"--rollouts-model={model.base_url}", "--rollouts-model-name=Qwen/Qwen3-8B"
        )
    assert result.ret == 0, result.stdout.str()
    assert len(model.calls) == 4
    assert {c.body["model"] for c in model.calls} == {"Qwen/Qwen3-8B"}


def test_a_model_url_reads_the_environment(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeModel() as model:
        monkeypatch.setenv("MODEL_URL", model.base_url)
        write_suite(pytester.path, "${MODEL_URL}")
        result = run_rollouts(pytester, "suite")
    assert result.ret == 0, result.stdout.str()
    assert len(model.calls) == 4


def test_an_unset_variable_is_an_error_naming_it_and_the_file(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MODEL_URL", raising=False)
    write_suite(pytester.path, "${MODEL_URL}")
    result = run_rollouts(pytester, "suite")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(
        ["*suite/rollouts.toml: agents.math.model: the environment variable MODEL_URL is not set*"]
    )


@pytest.mark.parametrize(
    ("declaration", "said"),
    [
        (
            'verifier = "verify.py:score"\nmodle = "http://127.0.0.1:9/v1"\n',
            "agents.math.modle: unknown key, did you mean 'model'?",
        ),
        (
            'url = "http://127.0.0.1:9"\nmodel_name = "m"\n',
            "'model_name' belong to a model agent, which needs 'verifier'",
        ),
        ('verifier = "verify.py:score"\n', "a model agent takes exactly one of 'model' or 'model_embedded'"),
        ('verifier = "verify.py:score"\nmodel = "http://127.0.0.1:9/v1"\napi = "completions"\n', "agents.math.api"),
    ],
)
def test_a_bad_declaration_is_a_collection_error(pytester: pytest.Pytester, declaration: str, said: str) -> None:
    (pytester.path / "suite").mkdir()
    (pytester.path / "suite" / "rollouts.toml").write_text(
        f'datasets = ["data.jsonl"]\nagent = "math"\n[agents.math]\n{declaration}'
    )
    (pytester.path / "suite" / "data.jsonl").write_text('{"responses_create_params": {"input": "x"}}\n')
    result = run_rollouts(pytester, "suite")
    assert result.ret != 0
    assert said in result.stdout.str()


def test_a_missing_verifier_is_refused_before_any_call(pytester: pytest.Pytester) -> None:
    with FakeModel() as model:
        write_suite(pytester.path, model.base_url)
        (pytester.path / "suite" / "verify.py").unlink()
        result = run_rollouts(pytester, "suite")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    assert "model agent 'math'" in result.stdout.str() + result.stderr.str()
    assert "verify.py: no such file" in result.stdout.str() + result.stderr.str()
    assert model.calls == []


def test_a_verifier_without_score_is_a_usage_error_under_xdist_too(pytester: pytest.Pytester) -> None:
    """Exit 2 and said by every worker and by xdist, where one process exits 4 and says it once."""
    with FakeModel() as model:
        write_suite(pytester.path, model.base_url)
        (pytester.path / "suite" / "verify.py").write_text("def other(row, response):\n    return 1.0\n")
        result = pytester.runpytest_subprocess(*QUIET, "-n", "2", "suite", "--rollouts-out=out/r.jsonl")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.outlines[-20:]
    said = result.stdout.str() + result.stderr.str()
    result.stderr.fnmatch_lines(["ERROR: model agent 'math': *verify.py has no 'score'"])
    assert said.count("has no 'score'") == 1 and "Traceback" not in said and "FAILURES" not in said, said
    assert model.calls == []


def test_model_calls_in_flight_are_bounded_by_model_parallel(pytester: pytest.Pytester) -> None:
    # Calls long enough that every wave of three overlaps, however loaded the machine.
    with FakeModel(lambda call: Reply(delay=0.3, json=reply_of(call, "0").json)) as model:
        write_suite(pytester.path, model.base_url, rows=questions(9))
        result = run_rollouts(pytester, "suite", "--rollouts-parallel=16", "--rollouts-model-parallel=3")
    assert result.ret == 0, result.stdout.str()
    assert model.peak_in_flight == 3


def test_the_api_key_is_sent_and_never_written_or_shown(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The model echoes the key it got (in its answers and in an error body): no file and no line
    of output keeps it."""
    monkeypatch.setenv("TEST_MODEL_KEY", SECRET)

    def echoes_its_key(call: Call) -> Reply:
        key = call.headers.get("Authorization", "")
        if call.body["messages"][-1]["content"] == "say 0":
            return Reply(status=400, raw=f'{{"error": "bad request from {key}"}}'.encode())
        return reply_of(call, f"you sent {key}")

    with FakeModel(echoes_its_key) as model:
        write_suite(pytester.path, model.base_url, extra='api_key_env = "TEST_MODEL_KEY"\n')
        result = run_rollouts(pytester, "suite", "-v", "--junitxml=out/junit.xml", "-rA")
    assert {c.headers["Authorization"] for c in model.calls} == {f"Bearer {SECRET}"}
    assert len(Artifacts(pytester.path).failures) == 1 and len(Artifacts(pytester.path).rows) == 3
    outputs = [p for p in Path(pytester.path).rglob("*") if p.is_file() and p.suffix in (".jsonl", ".json", ".xml")]
    assert len(outputs) >= 5
    for path in outputs:
        assert SECRET not in path.read_text(), path
    assert "[redacted]" in (pytester.path / "out" / "r_failures.jsonl").read_text()
    assert SECRET not in result.stdout.str() + result.stderr.str()
    assert "bad request from" in result.stdout.str()


def test_an_unset_key_variable_is_refused(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TEST_MODEL_KEY", raising=False)
    with FakeModel(echo) as model:
        write_suite(pytester.path, model.base_url, extra='api_key_env = "TEST_MODEL_KEY"\n')
        result = run_rollouts(pytester, "suite")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "the environment variable TEST_MODEL_KEY is not set" in result.stdout.str() + result.stderr.str()
    assert model.calls == []


@pytest.mark.parametrize(
    ("tools", "said"),
    [("[3]", "a tool must be a function, not 3"), ("[len]", "tool 'len': no JSON schema from its signature")],
)
def test_a_tool_without_a_schema_is_refused_before_any_call(pytester: pytest.Pytester, tools: str, said: str) -> None:
    with FakeModel() as model:
        write_suite(pytester.path, model.base_url, extra='tools = "tools.py:TOOLS"\n')
        (pytester.path / "suite" / "tools.py").write_text(f"TOOLS = {tools}\n")
        result = run_rollouts(pytester, "suite")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    assert f"model agent 'math': {said}" in result.stdout.str() + result.stderr.str()
    assert model.calls == []
