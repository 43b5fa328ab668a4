"""The model agent's response cache (``--rollouts-cache DIR``): real sessions against the loopback
model, whose request count says what was sent."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_rollouts import run

from ..agents import Reply
from ..helpers import QUIET, Artifacts, run_rollouts
from ..models import Call, FakeModel, adds_then_answers, echo, last_user_text, questions, write_suite


def metrics_usage(root: Path) -> dict[str, Any]:
    [group] = json.loads((root / "out" / "r_aggregate_metrics.json").read_text())
    return group["usage_summary"]


def test_a_rerun_of_unchanged_rows_does_not_call_the_model(pytester: pytest.Pytester) -> None:
    with FakeModel() as model:
        write_suite(pytester.path, model.base_url, rows=questions(4))
        first = run_rollouts(pytester, "suite", "--rollouts-cache=cache", "--rollouts-repeats=2")
        assert first.ret == 0, first.stdout.str()
        sent = len(model.calls)
        assert sent == 8  # the repeats are samples of their own, not one reply copied
        first.stdout.fnmatch_lines(["*model cache 0 hits, 8 misses*"])
        rewards = sorted(
            (r["_ng_task_index"], r["_ng_rollout_index"], r["reward"]) for r in Artifacts(pytester.path).rows
        )
        again = run_rollouts(pytester, "suite", "--rollouts-cache=cache", "--rollouts-repeats=2")
    assert again.ret == 0, again.stdout.str()
    assert len(model.calls) == sent, "every call came from the cache"
    again.stdout.fnmatch_lines(["*model cache 8 hits, 0 misses*"])
    assert (
        sorted((r["_ng_task_index"], r["_ng_rollout_index"], r["reward"]) for r in Artifacts(pytester.path).rows)
        == rewards
    )
    usage = metrics_usage(pytester.path)
    assert usage["model_cache_hits"] == 8 and usage["model_cache_misses"] == 0


def test_a_changed_request_misses_and_each_turn_of_a_tool_loop_is_kept(pytester: pytest.Pytester) -> None:
    extra = 'tools = "tools.py:TOOLS"\n'
    with FakeModel(adds_then_answers) as model:
        write_suite(pytester.path, model.base_url, extra=extra, rows=questions(2))
        assert run_rollouts(pytester, "suite", "--rollouts-cache=cache").ret == 0
        sent = len(model.calls)
        assert sent == 2 * 3  # three model calls a rollout
        assert run_rollouts(pytester, "suite", "--rollouts-cache=cache").ret == 0
        assert len(model.calls) == sent
        changed = [{**row, "responses_create_params": {"input": "say 7", "temperature": 0.5}} for row in questions(1)]
        write_suite(pytester.path, model.base_url, extra=extra, rows=changed)
        result = run_rollouts(pytester, "suite", "--rollouts-cache=cache")
    assert result.ret == 0, result.stdout.str()
    assert len(model.calls) == sent + 3, "the changed row's calls went to the model"


def failing_once(broken: set[str]) -> Any:
    """The model fails each prompt in ``broken`` the first time it is asked (a 500, a reply that is
    not JSON, a timeout: slower than --rollouts-model-timeout), then answers it."""
    failed: set[str] = set()

    def behaviour(call: Call) -> Reply:
        text = last_user_text(call)
        if text in broken and text not in failed:
            failed.add(text)
            return {
                "say 1": Reply(status=500, raw=b"boom"),
                "say 2": Reply(raw=b"not json"),
                "say 3": Reply(delay=5.0, json=echo(call).json),
            }[text]
        return echo(call)

    return behaviour


def test_failures_are_never_kept(pytester: pytest.Pytester) -> None:
    with FakeModel(failing_once({"say 1", "say 2", "say 3"})) as model:
        write_suite(pytester.path, model.base_url, rows=questions(4))
        options = ("--rollouts-cache=cache", "--rollouts-retries=0", "--rollouts-model-timeout=1")
        first = run_rollouts(pytester, "suite", *options)
        assert len(Artifacts(pytester.path).failures) == 3, first.stdout.str()
        before = len(model.calls)
        again = run_rollouts(pytester, "suite", *options)
    assert again.ret == 0, again.stdout.str()
    asked_again = sorted(last_user_text(call) for call in model.calls[before:])
    assert asked_again == ["say 1", "say 2", "say 3"], "only the failed calls went to the model again"
    assert Artifacts(pytester.path).failures == []
    again.stdout.fnmatch_lines(["*model cache 1 hits, 3 misses*"])


def test_a_damaged_entry_is_a_miss_said_on_stderr(tmp_path: Path) -> None:
    with FakeModel() as model:
        write_suite(tmp_path, model.base_url, rows=questions(2))
        command = [sys.executable, "-m", "pytest", *QUIET, "suite", "--rollouts-out=out/r.jsonl", "--rollouts-cache=c"]
        assert subprocess.run(command, cwd=tmp_path, capture_output=True, timeout=120).returncode == 0
        entries = sorted((tmp_path / "c").rglob("*.json"))
        assert len(entries) == 2 and len(model.calls) == 2
        entries[0].write_bytes(entries[0].read_bytes()[:20])  # cut short, as a full disk would leave it
        again = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stdout + again.stderr
    assert len(model.calls) == 3, "the damaged entry's call went to the model, the other did not"
    assert f"{entries[0]}: a damaged entry" in again.stderr and "is a miss" in again.stderr
    assert "Traceback" not in again.stderr + again.stdout
    assert json.loads(entries[0].read_bytes())["choices"], "the model's reply replaced it"


def test_two_xdist_workers_share_the_cache(pytester: pytest.Pytester) -> None:
    # Every row asks the same: both workers' dispatchers keep (and race to write) the same keys.
    rows = [{"responses_create_params": {"input": "say 1"}, "expected_answer": "1"} for _ in range(8)]
    with FakeModel() as model:
        write_suite(pytester.path, model.base_url, rows=rows)
        first = run_rollouts(pytester, "suite", "-n", "2", "--rollouts-cache=cache", "--rollouts-repeats=2")
        assert first.ret == 0, first.stdout.str()
        sent = len(model.calls)
        assert len(list((pytester.path / "cache").rglob("*.json"))) == 2  # one entry a repeat
        again = run_rollouts(pytester, "suite", "-n", "2", "--rollouts-cache=cache", "--rollouts-repeats=2")
    assert again.ret == 0, again.stdout.str()
    assert len(model.calls) == sent
    assert metrics_usage(pytester.path)["model_cache_hits"] == 16
    assert not [p for p in (pytester.path / "cache").rglob("*") if p.name.startswith(".")], "no private file left"


def test_the_python_api_takes_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with FakeModel() as model:
        write_suite(tmp_path, model.base_url, rows=questions(3))
        assert run({"input": "suite", "out": "out/first.jsonl", "cache": "cache"}).exit_status == 0
        result = run({"input": "suite", "out": "out/again.jsonl", "cache": "cache"})
    assert len(model.calls) == 3
    assert result.metrics[0]["usage_summary"]["model_cache_hits"] == 3
    assert "model cache 3 hits, 0 misses" in result.summary()


@pytest.mark.parametrize("value", ["", "a_file"])
def test_a_bad_cache_folder_is_refused_before_anything_is_sent(pytester: pytest.Pytester, value: str) -> None:
    (pytester.path / "a_file").write_text("not a folder")
    with FakeModel() as model:
        write_suite(pytester.path, model.base_url, rows=questions(2))
        result = run_rollouts(pytester, "suite", f"--rollouts-cache={value}")
    assert result.ret == 4, result.stdout.str()
    result.stderr.fnmatch_lines(["*--rollouts-cache*"])
    assert model.calls == [] and not (pytester.path / "out").exists()
