"""Edges a black-box review of the model agent found: a blocking tool, a verifier's numpy values
or unwritable ones, a reply without choices, row settings that would make the model stream, and
a ``Retry-After`` given as a date."""

from __future__ import annotations

import asyncio
import email.utils
import threading
import time
from pathlib import Path

import pytest

from pytest_rollouts import run
from pytest_rollouts.model.tools import Toolbox
from pytest_rollouts.net.retry import retry_after_seconds

from ..agents import Reply
from ..helpers import Artifacts
from ..models import FakeModel, echo, questions, write_suite


def test_a_plain_def_tool_runs_off_the_event_loop() -> None:
    """It ran on the dispatcher's loop: a tool that blocked froze every rollout in flight, their
    timeouts and Ctrl-C included."""
    opened = threading.Event()

    def gate() -> str:
        """Wait for the gate."""
        return "opened" if opened.wait(timeout=10) else "still shut"

    async def meanwhile() -> str:
        call = asyncio.create_task(Toolbox([gate]).call("gate", "{}"))
        await asyncio.sleep(0.05)  # reached only while the loop is free
        opened.set()
        return await call

    assert asyncio.run(meanwhile()) == "opened"


VERIFY_NUMPY = """
import numpy as np

def score(row, response):
    return {"reward": np.float64(1.0), "correct": np.bool_(True), "n": np.int64(3)}
"""

VERIFY_UNWRITABLE = """
def score(row, response):
    return {"reward": 1.0, "handle": object()}
"""


def test_a_verifiers_numpy_values_are_written_and_an_unwritable_one_is_its_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """numpy's values crashed the dispatcher ('Type is not JSON serializable: numpy.bool'), and no row was written."""
    with FakeModel(echo) as model:
        for name, verifier in (("a", VERIFY_NUMPY), ("b", VERIFY_UNWRITABLE)):  # a verifier file is loaded once
            (tmp_path / name).mkdir()
            monkeypatch.chdir(tmp_path / name)
            write_suite(tmp_path / name, model.base_url, rows=questions(2)[1:])
            (tmp_path / name / "suite" / "verify.py").write_text(verifier)
            run({"input": "suite", "out": "out/r.jsonl"})
    (row,) = Artifacts(tmp_path / "a").rows
    assert (row["reward"], row["correct"], row["n"]) == (1.0, True, 3)
    (failure,) = Artifacts(tmp_path / "b").failures
    assert (failure["_ng_failure_class"], failure["_ng_failure_type"]) == ("agent_run_error", "VerifierError")


@pytest.mark.parametrize("body", [{"id": "x", "choices": []}, {"id": "x"}], ids=["empty", "none"])
def test_a_reply_without_choices_is_a_broken_rollout_not_a_wrong_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: dict
) -> None:
    """It was scored 0 and passed: a broken gateway dragged the score down unseen."""
    monkeypatch.chdir(tmp_path)
    with FakeModel(lambda call: Reply(json=body)) as model:
        write_suite(tmp_path, model.base_url, rows=questions(2)[1:])
        run({"input": "suite", "out": "out/r.jsonl"})
    assert Artifacts(tmp_path).rows == []
    (failure,) = Artifacts(tmp_path).failures
    assert (failure["_ng_failure_class"], failure["_ng_failure_type"]) == ("agent_run_error", "InvalidModelReply")
    assert "no choices" in failure["_ng_failure_message"]


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_row_settings_that_would_stream_are_not_sent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, api: str) -> None:
    monkeypatch.chdir(tmp_path)
    row = {"responses_create_params": {"input": "say 1", "stream": True, "background": True}, "expected_answer": "1"}
    with FakeModel(echo) as model:
        write_suite(tmp_path, model.base_url, api=api, rows=[row])
        assert run({"input": "suite", "out": "out/r.jsonl"}).exit_status == 0
    assert not {"stream", "background"} & set(model.calls[0].body)


def test_retry_after_as_an_http_date() -> None:
    later = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 25 <= (retry_after_seconds(later) or 0) <= 30
    assert retry_after_seconds(email.utils.formatdate(time.time() - 30, usegmt=True)) == 0.0
    assert retry_after_seconds("soon") is None and retry_after_seconds("2.5") == 2.5


def test_tokens_per_second_only_when_the_session_sent_what_the_totals_count() -> None:
    """After a resume it divided the whole run's tokens by the resuming session's seconds (3x too high)."""
    from pytest_rollouts.scoring.perf import token_rates

    usage = {"num_rollouts": 150, "total_tokens": 2250, "output_tokens": 750}
    assert token_rates(usage, {"count": 150, "seconds": 0.5}) == {
        "output_tokens_per_second": 1500.0,
        "total_tokens_per_second": 4500.0,
    }
    assert token_rates(usage, {"count": 50, "seconds": 0.05}) == {}
