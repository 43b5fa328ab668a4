"""The materialized inputs are guarded like the outputs: they are the run's denominator and the
source of truth of every resume, so losing them must stop the run, never pass it or start afresh."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from ..agents import Reply, ScriptedAgent, verifier
from ..helpers import Artifacts, run_rollouts, tasks, write_rows


def test_materialized_inputs_removed_mid_run_stop_dispatch_and_fail_scoring(pytester: pytest.Pytester) -> None:
    """Dispatch went on, scoring found no file and skipped without a word, and the run passed
    (exit 0 even with --rollouts-require-complete)."""
    materialized = Artifacts(pytester.path).materialized_path

    def removes_the_inputs(row: dict[str, Any], seen: int) -> Reply:
        if len(agent.requests) == 4:
            materialized.unlink()
        return verifier(row, seen)

    write_rows(pytester.path / "data.jsonl", tasks(12))
    with ScriptedAgent(removes_the_inputs, latency=0.25) as agent:
        result = run_rollouts(
            pytester,
            "data.jsonl",
            f"--rollouts-agent={agent.url}",
            "--rollouts-repeats=2",
            "--rollouts-parallel=2",
            "--rollouts-require-complete",
        )
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        result.stderr.fnmatch_lines(
            ["*cannot score the run: its materialized inputs out/r_materialized_inputs.jsonl were removed*"]
        )
        assert len(agent.requests) < 24, "dispatch went on"


def test_materialized_inputs_replaced_mid_run_stop_dispatch(pytester: pytest.Pytester) -> None:
    """The dispatcher reads request bodies from the file it opened; scoring and resume read the one
    now at the path, so rows sent after a replacement would be counted against another file. (A
    copy of the same bytes is no other file: xdist workers each write one.)"""
    materialized = Artifacts(pytester.path).materialized_path

    def replaces_the_inputs(row: dict[str, Any], seen: int) -> Reply:
        if len(agent.requests) == 4:
            copy = materialized.with_name("copy.jsonl")
            copy.write_bytes(materialized.read_bytes())
            os.replace(copy, materialized)
        if len(agent.requests) == 6:  # the same rows in another order: every body at another offset
            lines = materialized.read_bytes().splitlines(keepends=True)
            copy = materialized.with_name("copy.jsonl")
            copy.write_bytes(b"".join(reversed(lines)))
            os.replace(copy, materialized)
        return verifier(row, seen)

    write_rows(pytester.path / "data.jsonl", tasks(12))
    with ScriptedAgent(replaces_the_inputs, latency=0.25) as agent:
        common = ("data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-repeats=2", "--rollouts-parallel=2")
        result = run_rollouts(pytester, *common)
        # Scored against the offsets this run wrote, the other file's rows are no rows at all.
        result.stderr.fnmatch_lines(["*cannot score the run: *r_materialized_inputs.jsonl*"])
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        assert 6 <= len(agent.requests) < 24, "the copy did not stop dispatch; the other rows did"
        sent = len(agent.requests)
        agent.latency = 0.0  # it held the first run back until the inputs were checked; the resume need not wait
        resumed = run_rollouts(pytester, *common, "--rollouts-resume")
        assert resumed.ret == pytest.ExitCode.OK
        assert len(Artifacts(pytester.path).rows) == 24 and len(agent.requests) > sent


@pytest.mark.parametrize("change", ["truncate", "overwrite"])
def test_materialized_inputs_changed_in_place_stop_dispatch_before_a_wrong_body_goes_out(
    pytester: pytest.Pytester, change: str
) -> None:
    """Cut short, or written over as ``cp`` onto it does (the same file, other bytes), the file
    was read at the run's offsets: bodies that were no rows went to the agent, and were filed as
    agent_run_error attempts."""
    materialized = Artifacts(pytester.path).materialized_path

    def changes_the_inputs(row: dict[str, Any], seen: int) -> Reply:
        if len(agent.requests) == 4:
            with open(materialized, "r+b") as handle:
                if change == "truncate":
                    handle.truncate(100)
                else:
                    handle.write(b'{"other": "rows", "longer": "than the first ones were"}\n' * 3)
        return verifier(row, seen)

    write_rows(pytester.path / "data.jsonl", tasks(12))
    with ScriptedAgent(changes_the_inputs, latency=0.25) as agent:
        result = run_rollouts(
            pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-repeats=2", "--rollouts-parallel=2"
        )
        bodies = list(agent.bodies)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*cannot score the run: *r_materialized_inputs.jsonl*"])
    assert all(isinstance(json.loads(body).get("_ng_task_index"), int) for body in bodies), "a wrong body went out"
    assert len(bodies) < 24, "dispatch went on"


def test_a_resume_that_finds_results_but_no_materialized_inputs_refuses(
    pytester: pytest.Pytester, agent: ScriptedAgent
) -> None:
    """It was a fresh run: every result moved aside and every rollout sent again."""
    write_rows(pytester.path / "data.jsonl", tasks(3))
    run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}")
    out = pytester.path / "out"
    Artifacts(pytester.path).materialized_path.unlink()
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    agent.requests.clear()
    result = run_rollouts(pytester, "data.jsonl", f"--rollouts-agent={agent.url}", "--rollouts-resume")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*cannot resume: the materialized inputs out/r_materialized_inputs.jsonl are missing, though "
            "out/r.jsonl hold rows of the run*run without --rollouts-resume to start afresh*"
        ]
    )
    assert agent.requests == []
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before, "nothing moved, nothing written"
