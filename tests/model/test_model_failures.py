"""How a model agent's rollouts fail: the model's statuses, broken replies and silence, and a
verifier that raises, each becomes the failure class the docs give it, with the model's status
and body (or the traceback) in the sidecar, and resume sends the rollout again."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_rollouts import run
from pytest_rollouts.model import calls
from pytest_rollouts.net.retry import MAX_BACKOFF_S, TIMER_SLACK_S, backoff_delay

from ..agents import Reply
from ..helpers import Artifacts, run_rollouts
from ..models import Call, FakeModel, echo, questions, reply_of, write_suite

FAST = ("--rollouts-retry-backoff=0.01",)
# A run in which no rollout produced a reward exits 9, whatever the failures are.
NO_REWARD_AT_ALL = 9


def failing_first(times: int, reply: Reply) -> Callable[[Call], Reply]:
    """``reply`` to the first ``times`` calls, then the echo model."""
    return lambda call: reply if call.number < times else echo(call)


def test_429_is_retried_after_the_time_retry_after_asks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the Python API (dispatch in this process), so the wait the client chose is seen."""
    asked: list[float | None] = []

    def recording(base: float, number: int, retry_after: float | None) -> float:
        asked.append(retry_after)
        return backoff_delay(base, number, retry_after)

    monkeypatch.setattr(calls, "backoff_delay", recording)
    monkeypatch.chdir(tmp_path)
    limited = Reply(status=429, json={"error": {"message": "slow down"}}, headers=(("Retry-After", "0.3"),))
    with FakeModel(failing_first(1, limited)) as model:
        write_suite(tmp_path, model.base_url, rows=questions(2)[1:])
        result = run({"input": "suite", "out": "out/r.jsonl", "retry_backoff": 0.01})
    assert result.exit_status == 0
    assert [r["reward"] for r in Artifacts(tmp_path).rows] == [1.0]
    assert len(model.calls) == 2
    assert asked == [0.3]


def test_the_backoff_never_comes_sooner_than_retry_after_nor_later_than_its_cap() -> None:
    # Past it by the timers' slack: a uvloop timer fired 56 us before a Retry-After date once.
    assert backoff_delay(0.01, 0, 2.5) == 2.5 + TIMER_SLACK_S
    assert 0.005 <= backoff_delay(0.01, 0, None) <= 0.01
    assert backoff_delay(0.01, 0, 3600.0) == MAX_BACKOFF_S


@pytest.mark.parametrize(
    ("reply", "kind"),
    [
        (Reply(status=500, raw=b'{"error": "the GPU fell over"}'), "ModelHTTPStatus"),
        (Reply(status=503, raw=b'{"error": "the GPU fell over"}'), "ModelHTTPStatus"),
        # Content-Length promises more than comes before the connection closes.
        (
            Reply(reset=True, raw=b'HTTP/1.1 200 OK\r\nContent-Length: 500\r\n\r\n{"id": "the GPU fell over'),
            "ClientPayloadError",
        ),
    ],
)
def test_an_unavailable_model_is_retried_then_agent_request_failed(
    pytester: pytest.Pytester, reply: Reply, kind: str
) -> None:
    with FakeModel(lambda call: reply) as model:
        write_suite(pytester.path, model.base_url, rows=questions(1))
        result = run_rollouts(pytester, "suite", "--rollouts-retries=2", *FAST)
        assert result.ret == NO_REWARD_AT_ALL, result.stdout.str()
        assert len(model.calls) == 3
        (failure,) = Artifacts(pytester.path).failures
        assert failure["_ng_failure_class"] == "agent_request_failed"
        assert failure["_ng_failure_type"] == kind
        assert "after 3 tries" in failure["_ng_failure_message"]
        if not reply.reset:
            assert failure["_ng_failure_http_status"] == reply.status
            assert "the GPU fell over" in failure["_ng_failure_response_body"]
        # Resume sends it again, and this time the model answers (the same address: a suite's
        # declaration is read once per process).
        model.behaviour = echo
        resumed = run_rollouts(pytester, "suite", "--rollouts-resume", *FAST)
    assert resumed.ret == 0, resumed.stdout.str()
    assert len(model.calls) == 4
    assert [r["_ng_attempt_index"] for r in Artifacts(pytester.path).rows] == [1]


CONTEXT = (
    b'{"error": {"message": "This model\'s maximum context length is 8192 tokens", '
    b'"type": "BadRequestError", "code": 400}}'
)


@pytest.mark.parametrize(
    ("reply", "kind", "said"),
    [
        (Reply(status=400, raw=CONTEXT), "ModelHTTPStatus", "maximum context length"),
        (Reply(status=200, raw=b'{"id": "chatcmpl-1", "choices": [}'), "InvalidModelReply", '"choices": [}'),
    ],
)
def test_a_model_that_refuses_or_garbles_is_agent_run_error_not_retried(
    pytester: pytest.Pytester, reply: Reply, kind: str, said: str
) -> None:
    with FakeModel(lambda call: reply) as model:
        write_suite(pytester.path, model.base_url, rows=questions(1))
        result = run_rollouts(pytester, "suite", "--rollouts-retries=2", *FAST)
    assert result.ret == NO_REWARD_AT_ALL, result.stdout.str()
    assert len(model.calls) == 1
    (failure,) = Artifacts(pytester.path).failures
    assert failure["_ng_failure_class"] == "agent_run_error"
    assert failure["_ng_failure_type"] == kind
    assert failure["_ng_failure_http_status"] == reply.status
    assert said in failure["_ng_failure_response_body"]


def test_a_hanging_model_times_out_per_call(pytester: pytest.Pytester) -> None:
    with FakeModel(lambda call: Reply(delay=30, json={})) as model:
        write_suite(pytester.path, model.base_url, rows=questions(1))
        result = run_rollouts(pytester, "suite", "--rollouts-model-timeout=0.2", "--rollouts-retries=1", *FAST)
    assert result.ret == NO_REWARD_AT_ALL, result.stdout.str()
    assert len(model.calls) == 2
    (failure,) = Artifacts(pytester.path).failures
    assert failure["_ng_failure_class"] == "agent_request_failed"
    assert failure["_ng_failure_type"] == "ModelTimeout"
    assert "within 0.2s" in failure["_ng_failure_message"]


def test_a_rollout_longer_than_its_timeout_ends(pytester: pytest.Pytester) -> None:
    """Each call is within the model timeout, but the turns together are not within the rollout's."""

    def slow_tool_loop(call: Call) -> Reply:
        return Reply(delay=0.15, json=reply_of(call, None, [("c", "add", '{"a": 1, "b": 2}')]).json)

    with FakeModel(slow_tool_loop) as model:
        write_suite(
            pytester.path, model.base_url, extra='tools = "tools.py:TOOLS"\nmax_turns = 100\n', rows=questions(1)
        )
        result = run_rollouts(pytester, "suite", "--rollouts-timeout=0.5", "--rollouts-model-timeout=5", *FAST)
    assert result.ret == NO_REWARD_AT_ALL, result.stdout.str()
    (failure,) = Artifacts(pytester.path).failures
    assert failure["_ng_failure_class"] == "agent_request_failed"
    assert failure["_ng_failure_type"] == "TimeoutError"
    assert "longer than 0.5s" in failure["_ng_failure_message"]
    assert 2 <= len(model.calls) < 100


RAISES = """
def score(row, response):
    return helper(row)

def helper(row):
    raise ZeroDivisionError("the verifier's own bug, row " + row["expected_answer"])
"""

EXTRA = """
async def score(row, response):
    return {"reward": 0.5, "extracted_answer": "x", "correct": False}
"""


def test_a_verifier_that_raises_is_agent_run_error_with_its_traceback(
    pytester: pytest.Pytester, model: FakeModel
) -> None:
    write_suite(pytester.path, model.base_url, rows=questions(2))
    (pytester.path / "suite" / "verify.py").write_text(RAISES)
    result = run_rollouts(pytester, "suite")
    assert result.ret == NO_REWARD_AT_ALL, result.stdout.str()
    failures = Artifacts(pytester.path).failures
    assert [f["_ng_failure_class"] for f in failures] == ["agent_run_error"] * 2
    body = failures[0]["_ng_failure_response_body"]
    assert "Traceback" in body and "in helper" in body and "ZeroDivisionError" in body
    assert "ZeroDivisionError" in failures[0]["_ng_failure_message"]
    assert result.stdout.str().count("agent_run_error") >= 1


def test_a_long_traceback_is_cut_to_the_body_size_keeping_its_end(pytester: pytest.Pytester, model: FakeModel) -> None:
    write_suite(pytester.path, model.base_url, rows=questions(1))
    (pytester.path / "suite" / "verify.py").write_text(
        "def score(row, response):\n    raise ValueError('x' * 5000 + ' deep down')\n"
    )
    result = run_rollouts(pytester, "suite")
    assert result.ret == NO_REWARD_AT_ALL, result.stdout.str()
    (failure,) = Artifacts(pytester.path).failures
    assert len(failure["_ng_failure_response_body"]) == 2000
    assert failure["_ng_failure_response_body"].rstrip().endswith("x deep down")


def test_an_async_verifier_may_return_a_dict_kept_in_the_row(pytester: pytest.Pytester, model: FakeModel) -> None:
    write_suite(pytester.path, model.base_url, rows=questions(1))
    (pytester.path / "suite" / "verify.py").write_text(EXTRA)
    result = run_rollouts(pytester, "suite")
    assert result.ret == 0, result.stdout.str()
    (row,) = Artifacts(pytester.path).rows
    assert (row["reward"], row["extracted_answer"], row["correct"]) == (0.5, "x", False)
