"""Agents by name, and bad input stopped before a single request is sent."""

from __future__ import annotations

import json

import pytest

from ..agents import ScriptedAgent
from ..helpers import Artifacts, run_rollouts, tasks, write_rows


def test_rows_pick_named_agents(pytester: pytest.Pytester) -> None:
    rows = tasks(4)
    rows[1]["agent_ref"] = {"name": "judge"}
    rows[3]["agent_ref"] = {"name": "judge"}
    write_rows(pytester.path / "data.jsonl", rows)
    with ScriptedAgent() as default, ScriptedAgent() as judge:
        result = run_rollouts(
            pytester, "data.jsonl", f"--rollouts-agent={default.url}", f"--rollouts-agent=judge={judge.url}"
        )
        result.assert_outcomes(passed=4)
        assert sorted(default.keys()) == [(0, 0), (2, 0)]
        assert sorted(judge.keys()) == [(1, 0), (3, 0)]
    names = {r["_ng_task_index"]: r["agent_ref"]["name"] for r in Artifacts(pytester.path).rows}
    assert names == {0: "default", 1: "judge", 2: "default", 3: "judge"}


def test_unknown_agent_stops_before_any_request(pytester: pytest.Pytester, agent: ScriptedAgent) -> None:
    rows = tasks(3)
    rows[2]["agent_ref"] = {"name": "nobody"}
    write_rows(pytester.path / "data.jsonl", rows)
    result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*data.jsonl:3: row names unknown agent 'nobody'*"])
    assert agent.requests == []
    assert not (pytester.path / "out").exists()


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (b'{"responses_create_params": {"input": "x"}', "not valid JSON"),
        (b"[1, 2]", "expected a JSON object, got list"),
        # It was replaced, silently, by run-level parameters or a seed.
        (b'{"responses_create_params": "oops"}', "responses_create_params must be a JSON object, not str"),
        (b'{"responses_create_params": null}', "responses_create_params must be a JSON object, not null"),
    ],
)
def test_malformed_line_names_file_and_line(
    pytester: pytest.Pytester, agent: ScriptedAgent, line: bytes, message: str
) -> None:
    path = write_rows(pytester.path / "data.jsonl", tasks(2))
    path.write_bytes(path.read_bytes() + line + b"\n")
    result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines([f"*data.jsonl:3: {message}*"])
    assert agent.requests == []


@pytest.mark.parametrize("run_level", [False, True])
def test_rows_without_create_params_run_with_one_notice(
    pytester: pytest.Pytester, agent: ScriptedAgent, run_level: bool
) -> None:
    """NeMo Gym agents refuse such a row (422); a custom agent may not need the field. A plain
    line: as a warning, -W error made it a collection error with a traceback."""
    write_rows(pytester.path / "data.jsonl", [{"expected_answer": "1", "answer": "1"}] * 7)
    extra = ['--rollouts-responses-create-params={"temperature": 0}'] if run_level else []
    result = run_rollouts(pytester, "-W", "error", "data.jsonl", f"--rollouts-agent={agent.url}", *extra)
    result.assert_outcomes(passed=7)
    notice = "rollouts: data.jsonl: 7 rows have no responses_create_params (lines 1, 2, 3, 4, 5, ...)*(HTTP 422)"
    if run_level:
        result.stdout.no_fnmatch_line(notice)
    else:
        result.stdout.fnmatch_lines([notice])


def test_suite_with_conflicting_agent_addresses_is_refused(pytester: pytest.Pytester) -> None:
    for name, port in (("a", 1), ("b", 2)):
        write_rows(pytester.path / name / "data.jsonl", tasks(1))
        (pytester.path / name / "rollouts.toml").write_text(
            f'datasets = ["data.jsonl"]\nagent = "x"\n[agents.x]\nurl = "http://u:hunter2-pass@127.0.0.1:{port}"\n'
        )
    result = run_rollouts(pytester, "a", "b")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*agent 'x' is declared with a different address elsewhere*"])
    assert "hunter2" not in result.stdout.str() + result.stderr.str(), "an address is shown without its password"


@pytest.mark.parametrize("datasets", [["data.jsonl", "nothere.jsonl"], ["nothere.jsonl"]])
def test_a_declared_dataset_that_matches_no_file_is_an_error(pytester: pytest.Pytester, datasets: list[str]) -> None:
    """A typo in a dataset name must not quietly shrink the eval (or leave it empty)."""
    write_rows(pytester.path / "s" / "data.jsonl", tasks(2))
    with ScriptedAgent() as agent:
        (pytester.path / "s" / "rollouts.toml").write_text(
            f'datasets = {json.dumps(datasets)}\nagent = "x"\n[agents.x]\nurl = "{agent.url}"\n'
        )
        result = run_rollouts(pytester, "s")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*rollouts.toml: datasets 'nothere.jsonl' match no file under *s"])
    assert agent.requests == []


def test_broken_declaration_is_reported(pytester: pytest.Pytester) -> None:
    write_rows(pytester.path / "s" / "data.jsonl", tasks(1))
    (pytester.path / "s" / "rollouts.toml").write_text('datasets = ["data.jsonl"]\nagent = "x"\n')
    result = run_rollouts(pytester, "s")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*rollouts.toml*default agent 'x' is not declared*"])
