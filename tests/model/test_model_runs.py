"""Model agents through the other front doors: the Python API's whole run (dispatch in the
caller's loop) and pytest-xdist (each worker's share of --rollouts-model-parallel)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_rollouts import CollectionRefused, output_text, run

from ..agents import Reply
from ..helpers import Artifacts, run_rollouts
from ..models import FakeModel, questions, reply_of, write_suite


def test_the_python_api_runs_a_suites_model_agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with FakeModel() as model:
        write_suite(tmp_path, model.base_url, api="responses", rows=questions(4))
        result = run({"input": "suite", "out": "out/r.jsonl", "repeats": 2, "model_parallel": 2})
    assert result.exit_status == 0
    assert result.mean_reward == pytest.approx(6 / 8)
    assert len(model.calls) == 8 and model.peak_in_flight <= 2
    (group,) = result.metrics
    assert group["metrics_source"] == "local"
    assert group["usage_summary"]["total_tokens"] == 120
    assert "(80% power); 120 tokens" in result.summary(), "a model agent's tokens join its interval line"
    assert model.elsewhere == []  # no /health, no /aggregate_metrics


def test_each_xdist_worker_gets_its_share_of_model_parallel(pytester: pytest.Pytester) -> None:
    with FakeModel(lambda call: Reply(delay=0.1, json=reply_of(call, "0").json)) as model:
        write_suite(pytester.path, model.base_url, rows=questions(24))
        result = run_rollouts(pytester, "suite", "-n", "2", "--rollouts-parallel=16", "--rollouts-model-parallel=2")
    assert result.ret == 0, result.stdout.str()
    assert len(Artifacts(pytester.path).rows) == 24
    # One call at a time per worker: two workers, two at most.
    assert model.peak_in_flight <= 2
    # The controller scores without asking the model for /aggregate_metrics, as a worker never
    # asks it for /health.
    assert model.elsewhere == []


def test_output_text_is_the_last_assistant_message() -> None:
    response = {
        "output": [
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "first"}]},
            {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "fin"}, {"type": "output_text", "text": "al"}],
            },
            {"type": "function_call_output", "call_id": "c", "output": "x"},
        ]
    }
    assert output_text(response) == "final"
    assert output_text({"output": []}) == ""


def test_the_python_api_refuses_an_unset_model_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MODEL_URL", raising=False)
    write_suite(tmp_path, "${MODEL_URL}")
    with pytest.raises(CollectionRefused, match="the environment variable MODEL_URL is not set"):
        run({"input": "suite", "out": "out/r.jsonl"})
